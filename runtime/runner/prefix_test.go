package runner

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
)

// A session restored from a saved state at a prefill-chunk boundary p and fed
// the rest of the prompt gives the logits of a cold prefill of the whole
// prompt, bit for bit, and then decodes the same tokens with the same
// logits, on both architectures. (Matrix products block rows, so a split
// inside a chunk changes the last bits: states are saved only at chunk
// boundaries, see SavePoint.)
func TestRestoreMatchesColdRun(t *testing.T) {
	ctx := context.Background()
	for _, model := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q4g32"} {
		t.Run(model, func(t *testing.T) {
			r := open(t, filepath.Join("..", "..", "testdata", "tiny", model), Options{PrefillChunk: 8})
			cold := generate(t, r.NewSession(), prompt, GenOptions{MaxNew: 6})
			for _, p := range []int{8, 16} {
				src := r.NewSession()
				if _, _, err := src.Feed(ctx, prompt[:p]); err != nil {
					t.Fatal(err)
				}
				saved := src.Save()
				// The source session moves on: the saved copy must not.
				if _, _, err := src.Feed(ctx, []int{3, 4, 5}); err != nil {
					t.Fatal(err)
				}
				s := r.NewSession()
				if _, _, err := s.Feed(ctx, []int{77, 78}); err != nil { // state to overwrite
					t.Fatal(err)
				}
				if err := s.Restore(saved); err != nil {
					t.Fatal(err)
				}
				if got := s.Tokens(); !slices.Equal(got, prompt[:p]) {
					t.Fatalf("p=%d: restored tokens %v", p, got)
				}
				warm := generate(t, s, prompt[p:], GenOptions{MaxNew: 6})
				if !slices.Equal(warm.tokens, cold.tokens) {
					t.Fatalf("p=%d: tokens %v after restore, %v cold", p, warm.tokens, cold.tokens)
				}
				for i := range cold.logits {
					if !sameBits(warm.logits[i], cold.logits[i]) {
						t.Fatalf("p=%d: logits of token %d differ after restore", p, i)
					}
				}
			}
		})
	}
}

func TestRestoreRefusesAnotherModel(t *testing.T) {
	a := open(t, filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64"), Options{})
	b := open(t, filepath.Join("..", "..", "testdata", "tiny", "qwen3_5_moe-q4g32"), Options{})
	s := a.NewSession()
	if _, _, err := s.Feed(context.Background(), prompt[:3]); err != nil {
		t.Fatal(err)
	}
	if err := b.NewSession().Restore(s.Save()); err == nil {
		t.Fatal("restored a state of another model")
	}
}

func TestPrefixCacheLongestAndLRU(t *testing.T) {
	r := open(t, filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64"), Options{})
	save := func(n int) *SavedState {
		s := r.NewSession()
		if _, _, err := s.Feed(context.Background(), prompt[:n]); err != nil {
			t.Fatal(err)
		}
		return s.Save()
	}
	s4, s8, s12 := save(4), save(8), save(12)
	c := NewPrefixCache(s4.Bytes() + s8.Bytes() + s12.Bytes())
	c.Put(s4)
	c.Put(s8)
	c.Put(s12)
	if got := c.Longest(prompt, len(prompt)); got != s12 {
		t.Fatalf("longest: got %d tokens, want 12", len(got.Tokens()))
	}
	if got := c.Longest(prompt, 10); got != s8 {
		t.Fatalf("longest at most 10: got %v", got)
	}
	other := slices.Clone(prompt)
	other[6] = 1
	if got := c.Longest(other, len(other)); got != s4 {
		t.Fatalf("diverging at 6: got %v, want the 4-token state", got)
	}
	if got := c.Longest([]int{9, 9, 9, 9, 9}, 5); got != nil {
		t.Fatalf("unrelated tokens: got %v", got)
	}
	// s12 is now the least recently used: a new state evicts it.
	s6 := save(6)
	c.Put(s6)
	st := c.Stats()
	if st.Bytes > c.Budget() {
		t.Fatalf("%d bytes held, budget %d", st.Bytes, c.Budget())
	}
	if got := c.Longest(prompt, len(prompt)); got == s12 {
		t.Fatal("the least recently used state was kept")
	}
	NewPrefixCache(s4.Bytes() - 1).Put(s4) // too large: not kept, no panic
	if n := NewPrefixCache(10).Stats().States; n != 0 {
		t.Fatal(n)
	}
}

// Resume reuses the longest saved state at a chunk boundary, saves a new
// one, and the generation that follows equals a cold one bit for bit.
func TestResumeReusesAndMatchesCold(t *testing.T) {
	r := open(t, filepath.Join("..", "..", "testdata", "tiny", "qwen3_5_moe-q4g32"), Options{PrefillChunk: 4})
	ctx := context.Background()
	long := append(slices.Clone(prompt), 40, 41, 42, 43, 44, 45, 46)
	cold := generate(t, r.NewSession(), long, GenOptions{MaxNew: 5})

	c := NewPrefixCache(1 << 30)
	s := r.NewSession()
	cached, rest, err := s.Resume(ctx, prompt, c)
	if err != nil || cached != 0 || len(rest) != len(prompt)-r.SavePoint(len(prompt)) {
		t.Fatalf("first resume: cached %d, rest %d, %v", cached, len(rest), err)
	}
	generate(t, s, rest, GenOptions{MaxNew: 3})
	cached, rest, err = s.Resume(ctx, long, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := r.SavePoint(len(prompt)); cached != want {
		t.Fatalf("second resume reused %d tokens, want %d", cached, want)
	}
	warm := generate(t, s, rest, GenOptions{MaxNew: 5})
	if !slices.Equal(warm.tokens, cold.tokens) {
		t.Fatalf("tokens %v after reuse, %v cold", warm.tokens, cold.tokens)
	}
	for i := range cold.logits {
		if !sameBits(warm.logits[i], cold.logits[i]) {
			t.Fatalf("logits of token %d differ after reuse", i)
		}
	}
	if _, _, err := s.Resume(ctx, nil, c); err == nil {
		t.Fatal("resume with no tokens")
	}
}
