package runner

import (
	"container/list"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/qpack-go/qpack/runtime"
)

// SavedState is a session's decode state at one position with the tokens
// that led there: restoring it and feeding more tokens gives the logits a
// cold run over all the tokens gives, bit for bit.
type SavedState struct {
	tokens []int
	snap   *runtime.Snapshot
}

// Tokens returns the tokens the saved state holds (do not modify).
func (s *SavedState) Tokens() []int { return s.tokens }

// Bytes is the memory the saved state takes (tensors and tokens).
func (s *SavedState) Bytes() int64 { return s.snap.Bytes() + 8*int64(len(s.tokens)) }

// Save copies the session's decode state (the tokens fed so far; a sampled
// token not yet fed is not part of it).
func (s *Session) Save() *SavedState {
	return &SavedState{tokens: slices.Clone(s.fed), snap: s.st.Snapshot()}
}

// Restore replaces the session's state with a copy of saved, which must
// come from a session of the same Runner. The conversation (Messages) is
// cleared: the session then holds only tokens.
func (s *Session) Restore(saved *SavedState) error {
	if err := s.st.Restore(saved.snap); err != nil {
		return err
	}
	s.fed = append(s.fed[:0], saved.tokens...)
	s.pending, s.pendEOS, s.msgs = -1, false, nil
	return nil
}

// PrefixCache keeps saved decode states up to a byte budget, evicting the
// least recently used, and finds the longest one whose tokens begin a new
// sequence. It is safe for concurrent use.
type PrefixCache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	lru    *list.List // of *SavedState, most recent first
	hits   int64
	misses int64
}

// NewPrefixCache returns a cache holding at most budget bytes (0 or less:
// nothing is kept).
func NewPrefixCache(budget int64) *PrefixCache {
	return &PrefixCache{budget: budget, lru: list.New()}
}

// Budget is the cache's byte budget.
func (c *PrefixCache) Budget() int64 { return c.budget }

// Put adds a saved state (one larger than the whole budget is not kept),
// evicting the least recently used ones to stay within the budget. A state
// with the same tokens as one already held replaces it.
func (c *PrefixCache) Put(s *SavedState) {
	if s == nil || len(s.tokens) == 0 || s.Bytes() > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if old := e.Value.(*SavedState); slices.Equal(old.tokens, s.tokens) {
			c.used -= old.Bytes()
			c.lru.Remove(e)
			break
		}
	}
	c.lru.PushFront(s)
	c.used += s.Bytes()
	for c.used > c.budget {
		e := c.lru.Back()
		c.used -= e.Value.(*SavedState).Bytes()
		c.lru.Remove(e)
	}
}

// Longest returns the saved state with the most tokens, at most maxLen,
// whose tokens are a prefix of tokens (nil if none), and marks it used.
func (c *PrefixCache) Longest(tokens []int, maxLen int) *SavedState {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *list.Element
	bestLen := 0
	for e := c.lru.Front(); e != nil; e = e.Next() {
		t := e.Value.(*SavedState).tokens
		if len(t) > bestLen && len(t) <= maxLen && len(t) <= len(tokens) && slices.Equal(t, tokens[:len(t)]) {
			best, bestLen = e, len(t)
		}
	}
	if best == nil {
		c.misses++
		return nil
	}
	c.hits++
	c.lru.MoveToFront(best)
	return best.Value.(*SavedState)
}

// PrefixStats describe a PrefixCache.
type PrefixStats struct {
	States       int   `json:"states"`
	Bytes        int64 `json:"bytes"`
	Budget       int64 `json:"budget"`
	Hits, Misses int64 `json:"-"`
}

// Stats returns the cache's current contents and lookups so far.
func (c *PrefixCache) Stats() PrefixStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return PrefixStats{States: c.lru.Len(), Bytes: c.used, Budget: c.budget, Hits: c.hits, Misses: c.misses}
}

// SavePoint is where a sequence of n tokens is split so that a state saved
// there can be reused bit for bit: the last multiple of the prefill chunk
// below n (0: none). Forward's products block the rows of a chunk, so the
// last bits of a token's logits depend on where its chunk starts; a state
// saved at a chunk boundary and fed the rest in chunks from there computes
// exactly what a cold prefill from position 0 computes.
func (r *Runner) SavePoint(n int) int {
	if n <= 1 {
		return 0
	}
	return (n - 1) / r.chunk * r.chunk
}

// Resume prepares the session to generate after tokens (the whole
// sequence): it restores the longest state in c that begins tokens at a
// chunk boundary (else empties the session), prefills up to SavePoint,
// saves the state there in c, and returns how many tokens the restored
// state held and the tokens still to feed (at least one), for Generate.
// A nil c reuses and saves nothing. The logits that follow are those of a
// cold prefill of tokens, bit for bit.
func (s *Session) Resume(ctx context.Context, tokens []int, c *PrefixCache) (cached int, rest []int, err error) {
	if len(tokens) == 0 {
		return 0, nil, errors.New("resume: no tokens")
	}
	point := s.r.SavePoint(len(tokens))
	s.Reset()
	if c != nil {
		if saved := c.Longest(tokens, point); saved != nil {
			if err := s.Restore(saved); err != nil {
				return 0, nil, err
			}
			cached = len(saved.tokens)
		}
	}
	if point > cached {
		if _, _, err := s.Feed(ctx, tokens[cached:point]); err != nil {
			return cached, nil, err
		}
		if c != nil {
			c.Put(s.Save())
		}
	}
	return cached, tokens[point:], nil
}
