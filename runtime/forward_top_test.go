package runtime_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/internal/topdev"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

// ForwardOptions.Top on a device that selects the top of the logits: Forward
// returns no logits and the top of the last token's final logits (after
// Gemma's softcapping), exactly what the host selects from the logits a
// pass without it returns, with the state advanced as usual. It reads the
// logits instead when Accept refuses, the device declines or Top does not
// apply (AllLogits, NoLogits, K 0, a device without selection), and
// returns the device's errors.
func TestForwardTop(t *testing.T) {
	type load func(be runtime.Backend) (*runtime.Model, error)
	synth := func(d synthetic.Dims) load {
		return func(be runtime.Backend) (*runtime.Model, error) {
			g, err := synthetic.Generate(d, 3)
			if err != nil {
				return nil, err
			}
			return g.Build(be)
		}
	}
	for _, c := range []struct {
		name    string
		load    load
		softcap float32
	}{
		{"qwen3_next", synth(tinyDims(runtime.TypeQwen3Next, 4, 32)), 0},
		{"qwen3_5_moe", synth(tinyDims(runtime.TypeQwen35MoE, 8, 64)), 0},
		{"gemma4", func(be runtime.Backend) (*runtime.Model, error) {
			return runtime.Load("../testdata/tiny/gemma4-q4g32", &runtime.LoadOptions{Backend: be})
		}, 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain, err := c.load(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			V := plain.Config.Vocab
			d := topdev.New(V, nil)
			m, err := c.load(d.Backend(nil))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if _, ok := m.Device().(nn.TopSelector); !ok {
				t.Fatalf("the model runs on %T, not the selecting device", m.Device())
			}
			want, err := plain.Forward(plain.NewState(), testTokens, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantAll, err := plain.Forward(plain.NewState(), testTokens, &runtime.ForwardOptions{AllLogits: true})
			if err != nil {
				t.Fatal(err)
			}
			const k = 5
			var ref nn.TopLogits
			if !nn.SelectTopRef(&ref, want, k, 0) {
				t.Fatal("SelectTopRef declined")
			}

			// Selected: no logits, the host's top of them, Into untouched.
			into := make([]float32, V)
			for i := range into {
				into[i] = float32(math.NaN())
			}
			var accepted int
			req := &runtime.TopRequest{K: k, Accept: func(tc *nn.TopLogits) bool {
				accepted++
				if tc.N != V || len(tc.IDs) < k {
					t.Errorf("Accept saw %d ids of %d", len(tc.IDs), tc.N)
				}
				return true
			}}
			st := m.NewState()
			got, err := m.Forward(st, testTokens, &runtime.ForwardOptions{Top: req, Into: into})
			if err != nil || got != nil {
				t.Fatalf("Forward with Top: %d logits, %v; want none", len(got), err)
			}
			tc := req.C
			if d.Calls != 1 || accepted != 1 || tc.N != V || tc.K != k || !slices.Equal(tc.IDs, ref.IDs) ||
				!sameFloats(tc.Logits, ref.Logits) || math.Float32bits(tc.Th) != math.Float32bits(ref.Th) {
				t.Fatalf("selected %+v (%d calls, %d accepts), the host's top of the logits %+v", tc, d.Calls, accepted, ref)
			}
			if c.softcap > 0 && slices.ContainsFunc(tc.Logits, func(v float32) bool { return !(math.Abs(float64(v)) <= float64(c.softcap)) }) {
				t.Fatalf("selected logits %v beyond the softcap %v: selected before softcapping", tc.Logits, c.softcap)
			}
			if slices.ContainsFunc(into, func(v float32) bool { return !math.IsNaN(float64(v)) }) || d.NReads != 0 {
				t.Fatalf("a selected pass read the logits (%d reads)", d.NReads)
			}
			// The state advanced as without Top: the next token's logits.
			ps := plain.NewState()
			if _, err := plain.Forward(ps, testTokens, &runtime.ForwardOptions{NoLogits: true}); err != nil {
				t.Fatal(err)
			}
			next := []int{int(tc.IDs[0])}
			w2, err := plain.Forward(ps, next, nil)
			if err != nil {
				t.Fatal(err)
			}
			g2, err := m.Forward(st, next, nil)
			if err != nil || !sameFloats(g2, w2) || st.Pos() != len(testTokens)+1 {
				t.Fatalf("after a selected pass: pos %d, logits equal %v (%v)", st.Pos(), sameFloats(g2, w2), err)
			}

			// Refused, declined, or not applicable: the logits.
			for _, f := range []struct {
				name  string
				opt   runtime.ForwardOptions
				calls int
				setup func()
			}{
				{"accept refuses", runtime.ForwardOptions{Top: &runtime.TopRequest{K: k, Accept: func(*nn.TopLogits) bool { return false }}}, 1, nil},
				{"device declines", runtime.ForwardOptions{Top: &runtime.TopRequest{K: k}}, 1, func() { d.Decline = func(int) bool { return true } }},
				{"too many ties for the device", runtime.ForwardOptions{Top: &runtime.TopRequest{K: k}}, 1, func() { d.Limit = k - 1 }},
				{"k 0", runtime.ForwardOptions{Top: &runtime.TopRequest{K: 0}}, 0, nil},
				{"all logits", runtime.ForwardOptions{Top: &runtime.TopRequest{K: k}, AllLogits: true}, 0, nil},
				{"selecting does not pay", runtime.ForwardOptions{Top: &runtime.TopRequest{K: k}}, 0, func() { d.Pays = func(n, kk int) bool { return n != V || kk != k } }},
			} {
				d.ResetCounts()
				d.Decline, d.Limit, d.Pays = nil, 0, nil
				if f.setup != nil {
					f.setup()
				}
				f.opt.Top.C = ref // stale: Forward must empty it
				got, err := m.Forward(m.NewState(), testTokens, &f.opt)
				w := want
				if f.opt.AllLogits {
					w = wantAll
				}
				if err != nil || !sameFloats(got, w) || d.Calls != f.calls || len(f.opt.Top.C.IDs) != 0 || f.opt.Top.C.N != 0 {
					t.Fatalf("%s: %v, logits equal %v, %d SelectTop calls (want %d), C %+v", f.name, err, sameFloats(got, w), d.Calls, f.calls, f.opt.Top.C)
				}
			}
			d.Decline, d.Limit, d.Pays = nil, 0, nil
			d.ResetCounts()
			if got, err := m.Forward(m.NewState(), testTokens, &runtime.ForwardOptions{NoLogits: true, Top: &runtime.TopRequest{K: k}}); got != nil || err != nil || d.Calls != 0 {
				t.Fatalf("NoLogits with Top: %d logits, %v, %d calls", len(got), err, d.Calls)
			}
			// A device without selection (the host device) reads the logits.
			got, err = plain.Forward(plain.NewState(), testTokens, &runtime.ForwardOptions{Top: &runtime.TopRequest{K: k}})
			if err != nil || !sameFloats(got, want) {
				t.Fatalf("Top on the host device: %v, logits equal %v", err, sameFloats(got, want))
			}

			// The device's errors, and a selection of the wrong length.
			boom := errors.New("selection failed")
			d.Err = boom
			if _, err := m.Forward(m.NewState(), testTokens, &runtime.ForwardOptions{Top: &runtime.TopRequest{K: k}}); !errors.Is(err, boom) {
				t.Fatalf("a failing SelectTop: %v", err)
			}
			d.Err, d.BadN = nil, V-1
			if _, err := m.Forward(m.NewState(), testTokens, &runtime.ForwardOptions{Top: &runtime.TopRequest{K: k}}); err == nil || !strings.Contains(err.Error(), "selected") {
				t.Fatalf("a selection of %d logits for %d: %v", V-1, V, err)
			}
			d.BadN = 0
		})
	}
}

// sameFloats reports equal lengths and bits.
func sameFloats(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
