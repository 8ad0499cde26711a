package hubtest

import (
	"time"
)

// Route names the part of the fake a request went to.
type Route string

const (
	RouteAny     Route = ""
	RouteInfo    Route = "info"          // GET /api/models/{repo}[/revision/{rev}]
	RouteTree    Route = "tree"          // GET /api/models/{repo}/tree/{rev}[/{path}]
	RoutePaths   Route = "paths-info"    // POST /api/models/{repo}/paths-info/{rev}
	RouteResolve Route = "resolve"       // HEAD/GET /{repo}/resolve/{rev}/{path}
	RouteCache   Route = "resolve-cache" // the relative 307 target (Config.ResolveCache)
	RouteCDN     Route = "cdn"           // the CDN host
	RouteOther   Route = "other"
)

// FaultKind is a scripted misbehaviour.
type FaultKind int

const (
	FaultStatus         FaultKind = iota // answer Status (with RetryAfter / RateLimit headers if set)
	FaultReset                           // close the connection without answering
	FaultCut                             // headers and AfterBytes of the body, then drop the connection
	FaultStall                           // headers and AfterBytes, then nothing for Delay (then the rest)
	FaultStallHeaders                    // nothing for Delay, then the normal answer
	FaultTrickle                         // the body at one byte per Delay
	FaultIgnoreRange                     // 200 with the whole file, whatever Range says
	FaultWrongOffset                     // 206 for a range starting Shift bytes before the one asked (honest Content-Range)
	FaultNoContentRange                  // 206 without Content-Range
	FaultLyingRange                      // 206 claiming the range asked but carrying bytes from Shift earlier
	FaultWrongBytes                      // the right headers, corrupted bytes
	FaultRedirectLoop                    // resolve: 302 to itself
	FaultHTML                            // 200 text/html "captive portal" page, no ETag
	FaultExpire                          // CDN: 403 as for an expired signature
	FaultHook                            // run Hook, then answer normally
	FaultTruncatedJSON                   // API JSON cut in half
	FaultBadLength                       // Content-Length one byte larger than the body (the connection is then dropped)
)

var faultNames = map[FaultKind]string{
	FaultStatus: "status", FaultReset: "reset", FaultCut: "cut", FaultStall: "stall",
	FaultStallHeaders: "stall-headers", FaultTrickle: "trickle", FaultIgnoreRange: "ignore-range",
	FaultWrongOffset: "wrong-offset", FaultNoContentRange: "no-content-range", FaultLyingRange: "lying-range",
	FaultWrongBytes: "wrong-bytes", FaultRedirectLoop: "redirect-loop", FaultHTML: "html",
	FaultExpire: "expire", FaultHook: "hook", FaultTruncatedJSON: "truncated-json", FaultBadLength: "bad-length",
}

func (k FaultKind) String() string { return faultNames[k] }

// Fault is applied to requests that match Route, Method and Path (empty
// fields match anything). The first Skip matching requests pass untouched,
// then the next Times are affected (0 means 1, negative means all).
type Fault struct {
	Kind   FaultKind
	Route  Route
	Method string
	Path   string // repository file path (resolve, resolve-cache and CDN routes)
	Skip   int
	Times  int

	Status     int
	RetryAfter string
	RateLimit  string
	AfterBytes int64
	Delay      time.Duration
	Shift      int64
	Hook       func()

	seen, used int
}

// Inject adds a fault. Faults are tried in the order they were added; at
// most one applies to a request.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Times == 0 {
		f.Times = 1
	}
	s.faults = append(s.faults, &f)
}

// ClearFaults removes all faults.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// FaultsPending reports how many faults still have uses left.
func (s *Server) FaultsPending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		if f.Times < 0 || f.used < f.Times {
			n++
		}
	}
	return n
}

func (s *Server) takeFault(route Route, method, path string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.Route != RouteAny && f.Route != route || f.Method != "" && f.Method != method || f.Path != "" && f.Path != path {
			continue
		}
		if f.Times >= 0 && f.used >= f.Times {
			continue
		}
		f.seen++
		if f.seen <= f.Skip {
			continue
		}
		f.used++
		c := *f
		return &c
	}
	return nil
}

// Request is one entry of the request log.
type Request struct {
	Seq       int    // order of arrival
	Role      string // "hub" or "cdn"
	Method    string
	Host      string // the Host header
	Path      string // escaped path
	Query     string
	Route     Route
	Repo      string
	Revision  string
	File      string // repository file path (resolve and CDN)
	Range     string
	Auth      bool // an Authorization header was present (its value is never recorded)
	UserAgent string
	Status    int
	BodyBytes int64
	Fault     string
}

// Requests returns a copy of the log in order of arrival. Requests still in
// progress are included with Status 0 (route, repository and file are
// filled in as soon as they are known, when the answer is decided).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// ResetLog empties the log.
func (s *Server) ResetLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

// Seq returns the sequence number the next request will get.
func (s *Server) Seq() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq + 1
}

// begin numbers a request and logs it at once (so a client that has read its
// answer always finds it in the log); finish updates the entry.
func (s *Server) begin(r *Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	r.Seq = s.seq
	s.log = append(s.log, *r)
	return r.Seq
}

func (s *Server) update(seq int, r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.log) - 1; i >= 0; i-- {
		if s.log[i].Seq == seq {
			s.log[i] = r
			return
		}
	}
}
