package verify

import (
	"context"
	"testing"

	"github.com/qpack-go/qpack/qpack"
)

// The scheduler of a shared pass: files in order of need, within the
// window; a file a stream waits for first, window or not; the others when
// the streams are done.
func TestShareOrder(t *testing.T) {
	v := &verifier{o: Options{KeepCache: true}, man: &qpack.Manifest{Files: map[string]int64{
		"a": 100, "b": 100, "c": 100, "x": 100, "big": 1000,
	}}}
	jobs := []*job{
		{file: "x", end: 100}, {file: "big", end: 1000},
		{file: "c", end: 100}, {file: "b", end: 100},
		{file: "a", end: 50}, {file: "a", off: 50, end: 100},
	}
	perShard := [][]segment{
		{{srcOff: 0, n: 10, file: "a"}, {srcOff: 10, n: 10, file: "big"}},
		{{srcOff: 0, n: 10, file: "b"}, {srcOff: 10, n: 10, file: "a"}},
		{{srcOff: 0, n: 10, file: "c"}},
	}
	s := newShare(v, jobs, perShard, 150)
	if !s.keep("a") || !s.keep("b") || !s.keep("c") || s.keep("x") || s.keep("big") {
		t.Fatal("a, b and c are shared; x is not compared, big is larger than the window")
	}
	if s.files["a"].users != 2 || s.files["b"].users != 1 {
		t.Fatalf("users: a %d, b %d", s.files["a"].users, s.files["b"].users)
	}
	ctx := context.Background()
	take := func(want string) *job {
		t.Helper()
		j := s.next(ctx)
		if j == nil || j.file != want {
			t.Fatalf("next: got %+v, want a job of %s", j, want)
		}
		return j
	}
	// Files not shared come before new admissions; then a, the first in
	// order of need (nothing held).
	take("x")
	take("big")
	a1 := take("a")
	if s.held != 100 {
		t.Fatalf("held %d after admitting a", s.held)
	}
	a2 := take("a") // admitted: its other job too
	// b does not fit (100 + 100 > 150); a stream asks for c: c goes first.
	s.ask(s.files["c"])
	c := take("c")
	if s.held != 200 {
		t.Fatalf("held %d: the asked-for file is admitted over the window", s.held)
	}
	for _, j := range []*job{a1, a2, c} {
		s.done(j)
	}
	select {
	case <-s.files["a"].ready:
	default:
		t.Fatal("a not ready after both its jobs")
	}
	// One of a's two streams finishes with it: still held.
	s.release("a")
	if s.held != 200 {
		t.Fatalf("held %d", s.held)
	}
	s.release("a")
	s.release("c")
	if s.held != 0 {
		t.Fatalf("held %d after releasing a and c", s.held)
	}
	take("b") // nothing held: b fits
	if j := s.next(ctx); j != nil {
		t.Fatalf("left over %+v", j)
	}
	// await on a file that is ready returns at once.
	if err := s.await(ctx, "a"); err != nil {
		t.Fatal(err)
	}
}

// The window never starves the digest pass: when the deep streams are
// done, the remaining files go whatever is held.
func TestShareFinishDeep(t *testing.T) {
	v := &verifier{o: Options{KeepCache: true}, man: &qpack.Manifest{Files: map[string]int64{"a": 100, "b": 100}}}
	jobs := []*job{{file: "a", end: 100}, {file: "b", end: 100}}
	s := newShare(v, jobs, [][]segment{{{n: 1, file: "a"}, {srcOff: 1, n: 1, file: "b"}}}, 150)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watch(ctx)()
	if j := s.next(ctx); j == nil || j.file != "a" {
		t.Fatalf("%+v", j)
	}
	got := make(chan *job)
	go func() { got <- s.next(ctx) }()
	s.finishDeep()
	if j := <-got; j == nil || j.file != "b" {
		t.Fatalf("%+v", j)
	}
	// A cancelled context wakes a waiting worker with nothing.
	s2 := newShare(v, jobs, [][]segment{{{n: 1, file: "a"}, {srcOff: 1, n: 1, file: "b"}}}, 150)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer s2.watch(ctx2)()
	s2.next(ctx2)
	go func() { got <- s2.next(ctx2) }()
	cancel2()
	if j := <-got; j != nil {
		t.Fatalf("%+v after cancel", j)
	}
}
