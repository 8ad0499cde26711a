package runner

import (
	"context"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime/internal/fakealloc"
	"github.com/qpack-go/qpack/runtime/internal/topdev"
	"github.com/qpack-go/qpack/runtime/sample"
)

// topGen generates from prompt on a fresh session of r.
func topGen(t *testing.T, r *Runner, g GenOptions) *Result {
	t.Helper()
	res, err := r.NewSession().Generate(context.Background(), prompt, g)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// On a device that selects the top of the logits (here the host device with
// nn.SelectTopRef), the decode draws each token after the first from the
// selection when the sampler can (greedy, top-k with or without top-p and
// min-p), with the tokens of the host's full-vector path, bit for bit; it
// reads the whole logits when OnToken needs them or a penalty applies, and
// falls back to them, with the same tokens, when the device declines or
// the sampler refuses the selection. The logits buffer survives selected
// steps: every read of the logits goes to one buffer (the runner's pinned
// one where the backend has an Allocator).
func TestDecodeSelectsTop(t *testing.T) {
	const maxNew = 16
	for _, tiny := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q4g32", "gemma4-q4g32"} {
		t.Run(tiny, func(t *testing.T) {
			dir := "../../testdata/tiny/" + tiny
			plain := open(t, dir, Options{})
			V := plain.Model.Config.Vocab
			d := topdev.New(V, nil)
			sel := open(t, dir, Options{Backend: d.Backend(nil)})
			fb := fakealloc.New()
			da := topdev.New(V, nil)
			pinned := open(t, dir, Options{Backend: da.Backend(fb)})
			if pinned.logits.al == nil {
				t.Fatal("the allocating backend lends no logits buffers")
			}

			decoded := 0
			for _, c := range []struct {
				name    string
				p       sample.Params
				onToken bool
				onSamp  bool
				decline func(int) bool
				limit   int
				want    string // "selected", "declined", "refused", "read"
			}{
				{name: "greedy", p: sample.Params{}, want: "selected"},
				{name: "top-k", p: sample.Params{Temperature: 1, TopK: 20, Seed: 3}, want: "selected"},
				{name: "top-k-top-p-min-p", p: sample.Params{Temperature: 0.8, TopK: 20, TopP: 0.9, MinP: 0.05, Seed: 5}, want: "selected"},
				{name: "top-k-64-hot", p: sample.Params{Temperature: 1.5, TopK: 64, Seed: 7}, want: "selected"},
				{name: "top-k-on-sampled", p: sample.Params{Temperature: 1, TopK: 20, Seed: 3}, onSamp: true, want: "selected"},
				{name: "greedy-on-token", p: sample.Params{}, onToken: true, want: "read"},
				{name: "top-k-on-token", p: sample.Params{Temperature: 1, TopK: 20, Seed: 3}, onToken: true, want: "read"},
				{name: "repetition-penalty", p: sample.Params{Temperature: 0.7, TopK: 20, RepetitionPenalty: 1.1, Seed: 3}, want: "read"},
				{name: "greedy-presence-penalty", p: sample.Params{PresencePenalty: 0.5}, want: "read"},
				{name: "no-top-k", p: sample.Params{Temperature: 1, Seed: 3}, want: "read"},
				{name: "declined-every-other", p: sample.Params{Temperature: 1, TopK: 20, Seed: 11}, decline: func(n int) bool { return n%2 == 1 }, want: "declined"},
				{name: "declined-greedy", p: sample.Params{}, decline: func(int) bool { return true }, want: "declined"},
				{name: "too-many-ties", p: sample.Params{Temperature: 1, TopK: 20, Seed: 3}, limit: 19, want: "declined"},
				// Dividing the largest logit by 5e-324 overflows: the
				// sampler's top-k scan gives up, and so Accept refuses.
				{name: "overflowing-temperature", p: sample.Params{Temperature: 5e-324, TopK: 20, Seed: 3}, want: "refused"},
			} {
				var seen []int
				g := GenOptions{MaxNew: maxNew, Sample: c.p}
				if c.onToken {
					g.OnToken = func(int, []float32) {}
				}
				if c.onSamp {
					g.OnSampled = func(id int) { seen = append(seen, id) }
				}
				want := topGen(t, plain, g)
				for _, v := range []struct {
					name string
					r    *Runner
					d    *topdev.Device
				}{{"selecting", sel, d}, {"selecting-pinned", pinned, da}} {
					v.d.ResetCounts()
					v.d.Decline, v.d.Limit = c.decline, c.limit
					seen = nil
					got := topGen(t, v.r, g)
					if !slices.Equal(got.Tokens, want.Tokens) || got.StopReason != want.StopReason || got.DecodeTokens != want.DecodeTokens {
						t.Fatalf("%s %s: tokens %v (%s), the full logits' %v (%s)", c.name, v.name, got.Tokens, got.StopReason, want.Tokens, want.StopReason)
					}
					if c.onSamp && !slices.Equal(seen[:len(got.Tokens)], got.Tokens) {
						t.Fatalf("%s: OnSampled saw %v, generated %v", c.name, seen, got.Tokens)
					}
					n, dc := got.DecodeTokens, v.d
					decoded += n
					// The prefill's last chunk reads the logits; each decode
					// step selects or reads them.
					var ok bool
					switch c.want {
					case "selected":
						ok = dc.Calls == n && dc.Selected == n && dc.NReads == 1
					case "declined":
						ok = dc.Calls == n && dc.Selected < n && dc.NReads == 1+n-dc.Selected
					case "refused": // selected, yet read
						ok = dc.Calls == n && dc.Selected == n && dc.NReads == 1+n
					case "read":
						ok = dc.Calls == 0 && dc.NReads == 1+n
					}
					if !ok {
						t.Fatalf("%s %s: want %s: %d decode steps, %d SelectTop calls, %d selected, %d logits reads", c.name, v.name, c.want, n, dc.Calls, dc.Selected, dc.NReads)
					}
					// One buffer for the decode's logits, whatever was
					// selected in between; the pinned one where lent.
					var pinnedReads int
					for p, k := range dc.Reads {
						if v.r == pinned && p == &pinned.logits.free[0][0] {
							pinnedReads = k
						}
					}
					if v.r == pinned {
						if pinnedReads != dc.NReads-1 {
							t.Fatalf("%s %s: %d of %d decode reads into the pinned buffer", c.name, v.name, pinnedReads, dc.NReads-1)
						}
					} else if len(dc.Reads) != 1 {
						t.Fatalf("%s %s: the logits were read into %d buffers, want 1", c.name, v.name, len(dc.Reads))
					}
				}
			}
			if decoded == 0 {
				t.Fatal("no decode step ran: the test tests nothing")
			}
		})
	}
}

// Accept makes the sampler's refusal after a selection impossible: over
// many random sessions the decode never asks SampleTop for a top it then
// declines (the generation would fail with sampleTop's error).
func TestSampleTopNeverDeclinesAccepted(t *testing.T) {
	dir := "../../testdata/tiny/qwen3_5_moe-q4g32"
	plain := open(t, dir, Options{})
	d := topdev.New(plain.Model.Config.Vocab, nil)
	sel := open(t, dir, Options{Backend: d.Backend(nil)})
	selected := 0
	for seed := range uint64(6) {
		for _, T := range []float64{5e-324, 1e-300, 1e-40, 0.5, 1, 3, 1e30, 0x1p869} {
			g := GenOptions{MaxNew: 6, Sample: sample.Params{Temperature: T, TopK: 1 + int(seed)*7, TopP: 0.9, Seed: seed}}
			want := topGen(t, plain, g)
			d.ResetCounts()
			got := topGen(t, sel, g) // fails on a declined accepted top
			if !slices.Equal(got.Tokens, want.Tokens) {
				t.Fatalf("T %g seed %d: tokens %v, want %v", T, seed, got.Tokens, want.Tokens)
			}
			selected += d.Selected
		}
	}
	if selected == 0 {
		t.Fatal("nothing was selected")
	}
}
