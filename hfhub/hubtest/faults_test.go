package hubtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// faultRepo is a repository with a regular and an LFS file, and the CDN URL
// of the LFS file (on 127.0.0.1, which the test client reaches directly).
func faultRepo(t *testing.T, cfg Config) (*Server, []byte, string) {
	t.Helper()
	s := start(t, cfg)
	big := make([]byte, 5000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	s.MustAddRepo("org/m", []File{{Path: "config.json", Data: []byte(`{"hidden_size":64}`)}, {Path: "w.bin", Data: big, LFS: true}}, RepoOptions{})
	resp, _ := do(t, "HEAD", s.URL+"/org/m/resolve/main/w.bin", nil)
	return s, big, strings.Replace(resp.Header.Get("Location"), "localhost", "127.0.0.1", 1)
}

func TestFaultCorruptMutations(t *testing.T) {
	s, big, cdn := faultRepo(t, Config{})
	cases := []struct {
		m    Mutation
		want func([]byte) []byte
	}{
		{Mutation{Op: MutateFlip, At: 3, Mask: 0x40}, func(b []byte) []byte { b[3] ^= 0x40; return b }},
		{Mutation{Op: MutateSwap, At: 0, With: 10, Len: 4}, func(b []byte) []byte {
			x := append([]byte(nil), b[0:4]...)
			copy(b[0:4], b[10:14])
			copy(b[10:14], x)
			return b
		}},
		{Mutation{Op: MutateTruncate, At: 7}, func(b []byte) []byte { return b[:7] }},
	}
	for _, tc := range cases {
		s.ClearFaults()
		s.Inject(Fault{Kind: FaultCorrupt, Route: RouteCDN, Path: "w.bin", Match: RangeFrom(100), Mutation: tc.m})
		// A range from another offset is untouched.
		_, body := do(t, "GET", cdn, map[string]string{"Range": "bytes=0-99"})
		if !bytes.Equal(body, big[:100]) {
			t.Fatalf("%v: a range the fault does not select was changed", tc.m.Op)
		}
		resp, body := do(t, "GET", cdn, map[string]string{"Range": "bytes=100-199"})
		want := tc.want(append([]byte(nil), big[100:200]...))
		if resp.StatusCode != 206 || !bytes.Equal(body, want) || resp.Header.Get("Content-Range") != "bytes 100-199/5000" {
			t.Fatalf("%v: %d %q, want %q", tc.m.Op, resp.StatusCode, body, want)
		}
	}
	// JSON bodies: a seeded flip changes exactly one bit of model info.
	s.ClearFaults()
	_, clean := do(t, "GET", s.URL+"/api/models/org/m", nil)
	s.Inject(Fault{Kind: FaultCorrupt, Route: RouteInfo, Mutation: Mutation{Op: MutateFlip, Seed: 42}})
	_, dirty := do(t, "GET", s.URL+"/api/models/org/m", nil)
	if len(clean) != len(dirty) {
		t.Fatalf("flip changed the length")
	}
	diff := 0
	for i := range clean {
		x := clean[i] ^ dirty[i]
		for ; x != 0; x &= x - 1 {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("%d bits differ, want 1", diff)
	}
	log := s.Requests()
	if f := log[len(log)-1].Fault; !strings.HasPrefix(f, "corrupt flip@") {
		t.Fatalf("log says %q", f)
	}
}

func TestFaultHang(t *testing.T) {
	s, _, _ := faultRepo(t, Config{})
	s.Inject(Fault{Kind: FaultHang, Route: RouteInfo, AfterBytes: 5})
	s.Inject(Fault{Kind: FaultHang, Route: RouteResolve, Path: "nope", Status: 404})
	for _, u := range []string{s.URL + "/api/models/org/m", s.URL + "/org/m/resolve/main/nope"} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s: headers should arrive: %v", u, err)
		}
		b, err := io.ReadAll(resp.Body)
		cancel()
		if err == nil || len(b) > 5 {
			t.Fatalf("%s: body should hang after 5 bytes, got %q, %v", u, b, err)
		}
	}
}

func TestFaultRangeKinds(t *testing.T) {
	s, big, cdn := faultRepo(t, Config{})
	s.Inject(Fault{Kind: FaultSliceOK, Route: RouteCDN})
	resp, body := do(t, "GET", cdn, map[string]string{"Range": "bytes=10-19"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Range") != "bytes 10-19/5000" || !bytes.Equal(body, big[10:20]) {
		t.Fatalf("slice-ok: %d %v", resp.StatusCode, resp.Header)
	}
	s.Inject(Fault{Kind: FaultIgnoreLaterRange, Route: RouteCDN, Times: -1})
	resp, body = do(t, "GET", cdn, map[string]string{"Range": "bytes=0-9"})
	if resp.StatusCode != 206 || !bytes.Equal(body, big[:10]) {
		t.Fatalf("ignore-later-range at 0: %d", resp.StatusCode)
	}
	resp, body = do(t, "GET", cdn, map[string]string{"Range": "bytes=10-19"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Range") != "" || !bytes.Equal(body, big) {
		t.Fatalf("ignore-later-range at 10: %d %d bytes", resp.StatusCode, len(body))
	}
	s.ClearFaults()
	s.Inject(Fault{Kind: FaultNoLinkedSize, Route: RouteResolve})
	resp, _ = do(t, "HEAD", s.URL+"/org/m/resolve/main/w.bin", nil)
	if resp.StatusCode != 302 || resp.Header.Get("X-Linked-Size") != "" || resp.Header.Get("X-Linked-Etag") == "" {
		t.Fatalf("no-linked-size: %d %v", resp.StatusCode, resp.Header)
	}
	if n := s.BytesServed("w.bin"); n != 10+10+5000 {
		t.Fatalf("BytesServed(w.bin) = %d", n)
	}
	if n := s.BytesServed("w.bin", 10); n != 10+5000 {
		t.Fatalf("BytesServed(w.bin, 10) = %d", n)
	}
}

func TestFaultEmptyPages(t *testing.T) {
	s, _, _ := faultRepo(t, Config{TreePageSize: 1})
	s.Inject(Fault{Kind: FaultEmptyPages, Route: RouteTree, Times: 3})
	u := s.URL + "/api/models/org/m/tree/main?recursive=true"
	seen := map[string]bool{}
	var entries int
	for pages := 0; u != ""; pages++ {
		if pages > 10 || seen[u] {
			t.Fatalf("pagination did not end or looped at %s", u)
		}
		seen[u] = true
		resp, body := do(t, "GET", u, nil)
		if pages < 3 && string(body) != "[]" {
			t.Fatalf("page %d: %s", pages, body)
		}
		entries += strings.Count(string(body), `"path"`)
		u = ""
		if l := resp.Header.Get("Link"); l != "" {
			u = l[1:strings.Index(l, ">")]
		}
	}
	if entries != 2 {
		t.Fatalf("%d entries after the empty pages, want 2", entries)
	}
}

func TestFaultTrickleRateAndConn(t *testing.T) {
	s, big, cdn := faultRepo(t, Config{})
	// Only the second connection to the CDN trickles.
	s.Inject(Fault{Kind: FaultTrickle, Route: RouteCDN, Conn: 2, Rate: 4000, Times: -1})
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	get := func() time.Duration {
		t0 := time.Now()
		resp, err := cl.Get(cdn)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(b, big) {
			t.Fatalf("trickled body differs")
		}
		return time.Since(t0)
	}
	get()
	slow := get()
	get()
	if slow < time.Second { // 5000 bytes at 4000 B/s
		t.Fatalf("the second connection took %v, want >= 1.25 s", slow)
	}
	var conns []int
	var faults []string
	for _, r := range s.Requests() {
		if r.Role == "cdn" && r.Method == "GET" {
			conns = append(conns, r.Conn)
			faults = append(faults, r.Fault)
		}
	}
	if len(conns) != 3 || conns[0] == conns[1] || faults[1] != "trickle" || faults[0] != "" || faults[2] != "" {
		t.Fatalf("conns %v faults %q", conns, faults)
	}
	u, _ := url.Parse(cdn)
	if u.Host == "" {
		t.Fatal("no host")
	}
}

func TestParseFault(t *testing.T) {
	f, err := ParseFault("kind=trickle,route=cdn,conn=3,rate=8192,times=-1")
	if err != nil || f.Kind != FaultTrickle || f.Route != RouteCDN || f.Conn != 3 || f.Rate != 8192 || f.Times != -1 {
		t.Fatalf("%+v %v", f, err)
	}
	f, err = ParseFault("kind=corrupt,route=resolve,method=get,path=config.json,op=swap,at=1,with=9,len=3,delay=2s")
	if err != nil || f.Kind != FaultCorrupt || f.Method != "GET" || f.Path != "config.json" ||
		f.Mutation != (Mutation{Op: MutateSwap, At: 1, With: 9, Len: 3}) || f.Delay != 2*time.Second {
		t.Fatalf("%+v %v", f, err)
	}
	for _, bad := range []string{"", "route=cdn", "kind=nope", "kind=cut,after=x", "kind=cut,colour=red", "kind=hook", "kind=cut,delay=soon", "kind=corrupt,op=melt", "kind"} {
		if _, err := ParseFault(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseFault(f *testing.F) {
	f.Add("kind=trickle,route=cdn,conn=3,rate=8192,times=-1")
	f.Add("kind=corrupt,op=flip,seed=7")
	f.Fuzz(func(t *testing.T, spec string) {
		fl, err := ParseFault(spec)
		if err != nil {
			return
		}
		if !strings.Contains(spec, "kind=") || fl.Kind == FaultHook || fl.Kind.String() == "" {
			t.Fatalf("%q parsed to %+v", spec, fl)
		}
	})
}

func TestFaultBySeq(t *testing.T) {
	s, _, _ := faultRepo(t, Config{})
	next := s.Seq() + 1 // the second request from now
	s.Inject(Fault{Kind: FaultStatus, Status: 502, Seq: next})
	var codes []int
	for i := 0; i < 3; i++ {
		resp, _ := do(t, "GET", s.URL+"/api/models/org/m", nil)
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 502 || codes[2] != 200 {
		t.Fatalf("codes %v", codes)
	}
}

// Settle waits for handlers still running: a hanging answer keeps one
// running (Settle false, its entry Status 0) until the client goes away;
// then the entry is final and Settle true.
func TestSettle(t *testing.T) {
	s, _, _ := faultRepo(t, Config{})
	if !s.Settle(0) {
		t.Fatal("Settle false with no request")
	}
	s.Inject(Fault{Kind: FaultHang, Route: RouteInfo, AfterBytes: 5})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/api/models/org/m", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("headers should arrive: %v", err)
	}
	defer resp.Body.Close()
	if s.Settle(50 * time.Millisecond) {
		t.Fatal("Settle true while an answer hangs")
	}
	if log := s.Requests(); len(log) == 0 || log[len(log)-1].Status != 0 {
		t.Fatalf("in progress: log %+v", log)
	}
	cancel()
	log, ok := s.SettledRequests()
	if last := log[len(log)-1]; !ok || last.Route != RouteInfo || last.Status != 200 || last.BodyBytes != 5 {
		t.Fatalf("after the client left: ok %v, log %+v", ok, log)
	}
}
