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
	FaultTrickle                         // the body at one byte per Delay, or at Rate bytes/s (any route) when Rate > 0
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

	// Kinds added for the hostile-network suite.

	FaultCorrupt          // the answer with Mutation applied to its body (any route: JSON, error bodies, files, ranges); a HEAD has no body, so give Method "GET" to hit the download
	FaultHang             // headers and AfterBytes of the body, then nothing until the client goes away (Delay > 0: until then, and the connection is dropped); with Status, that error answer hangs
	FaultEmptyPages       // tree: an empty page with a fresh rel="next" link (same cursor, new URL)
	FaultSliceOK          // 200 carrying exactly the range asked, with a correct Content-Range (ModelScope)
	FaultIgnoreLaterRange // a Range starting at 0 is honoured; one at a later offset gets 200 with the whole file
	FaultNoLinkedSize     // resolve of an LFS file: the redirect lacks X-Linked-Size
)

var faultNames = map[FaultKind]string{
	FaultStatus: "status", FaultReset: "reset", FaultCut: "cut", FaultStall: "stall",
	FaultStallHeaders: "stall-headers", FaultTrickle: "trickle", FaultIgnoreRange: "ignore-range",
	FaultWrongOffset: "wrong-offset", FaultNoContentRange: "no-content-range", FaultLyingRange: "lying-range",
	FaultWrongBytes: "wrong-bytes", FaultRedirectLoop: "redirect-loop", FaultHTML: "html",
	FaultExpire: "expire", FaultHook: "hook", FaultTruncatedJSON: "truncated-json", FaultBadLength: "bad-length",
	FaultCorrupt: "corrupt", FaultHang: "hang", FaultEmptyPages: "empty-pages", FaultSliceOK: "slice-ok",
	FaultIgnoreLaterRange: "ignore-later-range", FaultNoLinkedSize: "no-linked-size",
}

func (k FaultKind) String() string { return faultNames[k] }

// Fault is applied to requests that match Route, Method, Path, Seq, Conn
// and Match (zero fields match anything). The first Skip matching requests
// pass untouched, then the next Times are affected (0 means 1, negative
// means all).
//
// To hit exactly one chosen response deterministically while a client reads
// in parallel, select it by what it is rather than by arrival order: Route +
// Path + Match (for example RangeCovers(0) for the range holding a file's
// first byte, the safetensors header), or Seq in a phase that is sequential
// (model info, tree pages).
type Fault struct {
	Kind   FaultKind
	Route  Route
	Method string
	Path   string // repository file path (resolve, resolve-cache and CDN routes)
	Seq    int    // only the request with this sequence number (Request.Seq; 0: any)
	Conn   int    // only requests on this connection (Request.Conn; 0: any)
	// Match, if set, must also accept the request (route, method, path,
	// range and connection are filled in when it is called).
	Match func(Request) bool
	Skip  int
	Times int

	Status     int
	RetryAfter string
	RateLimit  string
	AfterBytes int64
	Delay      time.Duration
	Shift      int64
	Hook       func()
	// Rate: FaultTrickle sends the body at this many bytes per second
	// (0: one byte per Delay); applies to every route's body.
	Rate int64
	// Mutation is what FaultCorrupt does to the body.
	Mutation Mutation

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

func (s *Server) takeFault(r Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.Route != RouteAny && f.Route != r.Route || f.Method != "" && f.Method != r.Method || f.Path != "" && f.Path != r.File ||
			f.Seq != 0 && f.Seq != r.Seq || f.Conn != 0 && f.Conn != r.Conn {
			continue
		}
		if f.Match != nil && !f.Match(r) {
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
	Seq      int    // order of arrival
	Role     string // "hub" or "cdn"
	Method   string
	Host     string // the Host header
	Path     string // escaped path
	Query    string
	Route    Route
	Repo     string
	Revision string
	File     string // repository file path (resolve and CDN)
	Range    string
	// RangeOff and RangeLen are the Range header parsed as one "bytes=a-b"
	// or "bytes=a-" range (RangeLen -1 for an open end); RangeOff is -1
	// without a (parsable) Range header.
	RangeOff, RangeLen int64
	Conn               int  // connection number on its listener (1, 2, …, per role)
	Auth               bool // an Authorization header was present (its value is never recorded)
	UserAgent          string
	Status             int
	BodyBytes          int64  // body bytes written to the client
	Fault              string // the fault applied (with what a Mutation did: "corrupt flip@12^0x04")
}

// Covers reports whether the request's Range includes byte off of the file
// (a request without Range covers everything).
func (r Request) Covers(off int64) bool {
	if r.RangeOff < 0 {
		return true
	}
	return off >= r.RangeOff && (r.RangeLen < 0 || off < r.RangeOff+r.RangeLen)
}

// RangeCovers is a Fault.Match accepting requests whose range includes byte
// off (RangeCovers(0): the range holding a safetensors header).
func RangeCovers(off int64) func(Request) bool {
	return func(r Request) bool { return r.Covers(off) }
}

// RangeFrom is a Fault.Match accepting requests whose range starts at off.
func RangeFrom(off int64) func(Request) bool {
	return func(r Request) bool { return r.RangeOff == off }
}

// BytesServed sums the body bytes sent for file (a repository path) by GETs
// on the resolve, resolve-cache and CDN routes; with ranges given it counts
// only requests whose Range starts at one of those offsets. It first waits
// (Settle, up to settleWait) for requests in progress: a handler logs its
// body bytes after its last write, which the client may have read already.
func (s *Server) BytesServed(file string, rangeOffs ...int64) int64 {
	s.Settle(settleWait)
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, r := range s.log {
		if r.File != file || r.Method != "GET" || (r.Route != RouteResolve && r.Route != RouteCache && r.Route != RouteCDN) {
			continue
		}
		if len(rangeOffs) > 0 {
			hit := false
			for _, o := range rangeOffs {
				hit = hit || r.RangeOff == o
			}
			if !hit {
				continue
			}
		}
		n += r.BodyBytes
	}
	return n
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

// settleWait bounds BytesServed's and SettledRequests' wait for handlers
// still running (5 s: the tests' answers take milliseconds).
const settleWait = 5 * time.Second

// Settle waits until every request that has arrived has been answered and
// logged (its handler returned: Status and BodyBytes final), polling, at
// most timeout; it reports whether that happened. A client's download can
// return before the handler that served its last bytes has logged them.
func (s *Server) Settle(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		n := s.running
		s.mu.Unlock()
		if n == 0 {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// SettledRequests is Requests after Settle(settleWait); ok is Settle's
// answer (false: some entries may still be in progress, Status 0).
func (s *Server) SettledRequests() (log []Request, ok bool) {
	ok = s.Settle(settleWait)
	return s.Requests(), ok
}

// begin numbers a request and logs it at once (so a client that has read its
// answer always finds it in the log); update changes the entry, finish marks
// its handler done.
func (s *Server) begin(r *Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running++
	s.seq++
	r.Seq = s.seq
	s.log = append(s.log, *r)
	return r.Seq
}

func (s *Server) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
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
