package server

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The prefill time of a completion (the log's prefill_seconds) covers the
// whole prompt: Resume feeds it up to its save point before Generate runs
// the tail, and that part was left out (a 600-token prompt fed one token a
// pass reported the last pass only). With one new token, prefill is most of
// the call's time; the check allows half of it.
func TestGeneratePrefillCoversResume(t *testing.T) {
	s, _ := newTiny(t, Config{PrefixCache: -1}, 1)
	ids := s.r.Tokenizer.Encode(strings.Repeat("hello ", 120))
	if len(ids) < 300 {
		t.Fatalf("prompt of %d tokens: want a long one", len(ids))
	}
	start := time.Now()
	o, err := s.generate(context.Background(), &job{prompt: ids, gen: genParams{sample: s.cfg.Defaults}, maxNew: 1})
	total := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if o.prefill < total/2 {
		t.Fatalf("prefill %v of a %v call for %d prompt tokens and 1 new one: the resumed part is not counted", o.prefill, total, len(ids))
	}
}
