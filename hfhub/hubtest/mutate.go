package hubtest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// MutationOp is what a Mutation does to a response body.
type MutationOp int

const (
	MutateFlip     MutationOp = iota // XOR the byte at At with Mask
	MutateSwap                       // swap the Len bytes at At with the Len bytes at With
	MutateTruncate                   // keep the first At bytes; Content-Length says so (a consistent short answer)
)

var mutationNames = [...]string{MutateFlip: "flip", MutateSwap: "swap", MutateTruncate: "truncate"}

func (op MutationOp) String() string {
	if int(op) < len(mutationNames) {
		return mutationNames[op]
	}
	return "op" + strconv.Itoa(int(op))
}

// Mutation corrupts one response body (FaultCorrupt). Offsets are in the
// body as sent: for a range answer, byte 0 is the first byte of the range.
// With Seed nonzero the positions (and Mask) are drawn from Seed and the
// actual body length, so a test can say "a random flip of this response"
// without knowing its size; the fields then only choose the Op. Positions
// outside the body are clamped into it; an empty body is left alone.
//
// The whole body of a corrupted answer is held in memory before it is sent
// (test bodies are small); headers wait for it, and only Content-Length is
// rewritten (for a truncation).
type Mutation struct {
	Op   MutationOp
	At   int64 // flip: the byte; swap: the first substring; truncate: the new length
	Mask byte  // flip: XOR mask (0 → 0x01)
	With int64 // swap: start of the second substring (clamped so the two do not overlap)
	Len  int64 // swap: substring length (0 → 1)
	Seed uint64
}

// resolve fixes the positions for a body of n bytes; ok=false when the
// mutation cannot change anything (empty body, no room for a swap).
func (m Mutation) resolve(n int64) (Mutation, bool) {
	if n <= 0 {
		return m, false
	}
	if m.Seed != 0 {
		r := rand.New(rand.NewPCG(m.Seed, m.Seed^0x5851f42d4c957f2d))
		switch m.Op {
		case MutateFlip:
			m.At, m.Mask = r.Int64N(n), byte(1)<<r.IntN(8)
		case MutateSwap:
			if n < 2 {
				return m, false
			}
			m.Len = 1 + r.Int64N(min(n/2, 32))
			m.At = r.Int64N(n - 2*m.Len + 1)
			m.With = m.At + m.Len + r.Int64N(n-m.At-2*m.Len+1)
		case MutateTruncate:
			m.At = r.Int64N(n)
		}
	}
	switch m.Op {
	case MutateFlip:
		m.At = min(max(m.At, 0), n-1)
		if m.Mask == 0 {
			m.Mask = 1
		}
	case MutateSwap:
		m.Len = min(max(m.Len, 1), n/2)
		if m.Len == 0 {
			return m, false
		}
		m.At = min(max(m.At, 0), n-2*m.Len)
		m.With = min(max(m.With, m.At+m.Len), n-m.Len)
	case MutateTruncate:
		m.At = min(max(m.At, 0), n-1)
	}
	return m, true
}

// apply returns the mutated body and a note for the request log.
func (m Mutation) apply(b []byte) ([]byte, string) {
	r, ok := m.resolve(int64(len(b)))
	if !ok {
		return b, m.Op.String() + " (no-op)"
	}
	switch r.Op {
	case MutateFlip:
		b[r.At] ^= r.Mask
		return b, fmt.Sprintf("flip@%d^0x%02x", r.At, r.Mask)
	case MutateSwap:
		x, y := b[r.At:r.At+r.Len], b[r.With:r.With+r.Len]
		tmp := append([]byte(nil), x...)
		copy(x, y)
		copy(y, tmp)
		if string(x) == string(tmp) {
			return b, fmt.Sprintf("swap@%d,%d+%d (identical, no-op)", r.At, r.With, r.Len)
		}
		return b, fmt.Sprintf("swap@%d,%d+%d", r.At, r.With, r.Len)
	case MutateTruncate:
		return b[:r.At], fmt.Sprintf("truncate@%d", r.At)
	}
	return b, "unknown op"
}

// bodyFault makes logWriter misbehave for the body-level fault kinds that
// apply to any route: FaultCorrupt, FaultHang and FaultTrickle with Rate.
type bodyFault struct {
	f     *Fault
	done  <-chan struct{} // the request's context
	held  bool            // corrupt: headers held until the body is complete
	buf   []byte
	hung  bool
	start time.Time
	note  string
}

func (w *logWriter) setFault(f *Fault, done <-chan struct{}) {
	switch f.Kind {
	case FaultCorrupt, FaultHang:
	case FaultTrickle:
		if f.Rate <= 0 {
			return // one byte per Delay: done by writeBody for file content
		}
	default:
		return
	}
	w.bf = &bodyFault{f: f, done: done, start: time.Now()}
}

// faultWrite handles Write for a body fault; ok=false means "write as usual".
func (w *logWriter) faultWrite(b []byte) (int, error, bool) {
	bf := w.bf
	if bf == nil {
		return 0, nil, false
	}
	switch bf.f.Kind {
	case FaultCorrupt:
		bf.buf = append(bf.buf, b...)
		return len(b), nil, true
	case FaultHang:
		if bf.hung {
			return len(b), nil, true // after the hang the rest is swallowed: the body stays short
		}
		if keep := min(int64(len(b)), bf.f.AfterBytes-w.bytes); keep > 0 {
			if n, err := w.rawWrite(b[:keep]); err != nil {
				return n, err, true
			}
		}
		if w.bytes < bf.f.AfterBytes {
			return len(b), nil, true
		}
		bf.hung = true
		w.ResponseWriter.(http.Flusher).Flush()
		if wait(bf.done, bf.f.Delay) {
			panic(http.ErrAbortHandler) // Delay ran out: drop the connection
		}
		return len(b), nil, true
	case FaultTrickle:
		step := max(1, bf.f.Rate/50)
		for i := 0; i < len(b); {
			k := int(min(int64(len(b)-i), step))
			if _, err := w.rawWrite(b[i : i+k]); err != nil {
				return i, err, true
			}
			i += k
			w.Flush()
			want := time.Duration(float64(w.bytes) / float64(bf.f.Rate) * float64(time.Second))
			if d := want - time.Since(bf.start); d > 0 {
				if !wait(bf.done, d) {
					return i, http.ErrHandlerTimeout, true
				}
			}
		}
		return len(b), nil, true
	}
	return 0, nil, false
}

// finishFault sends a held (corrupted) answer; called when the handler returns.
func (w *logWriter) finishFault() string {
	bf := w.bf
	if bf == nil {
		return ""
	}
	if bf.f.Kind == FaultCorrupt && bf.held {
		body, note := bf.f.Mutation.apply(bf.buf)
		bf.note = note
		if len(body) != len(bf.buf) {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		w.ResponseWriter.WriteHeader(w.status)
		w.bf = nil
		w.rawWrite(body)
	}
	return bf.note
}

// wait blocks for d (forever if d <= 0) or until done; it reports whether
// the time ran out (rather than the request ending).
func wait(done <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		<-done
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
