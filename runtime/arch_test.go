package runtime_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// A third architecture registers from its own package (here, this test
// file) without touching the others: the registry is the only shared list.
// toy_moe is embed → one MoE layer (softmax top-k, SiLU experts, through
// the shared dispatcher) added to the residual → a sliding-window
// attention layer over a ring-buffer cache → tied head.
const toyType = "toy_moe"

func init() {
	runtime.Register(runtime.Arch{Name: toyType, Build: buildToy,
		ExpertModule: func(c *runtime.Config, l int) string { return fmt.Sprintf("toy.%d.experts", l) }})
}

const (
	toyV, toyH, toyE, toyK, toyI = 11, 8, 5, 2, 6
	toyHeads, toyKV, toyHD, toyW = 2, 1, 4, 3
)

type toyGraph struct {
	embed, router, q, k, v, o mlxq.Matrix
	rope                      *nn.RoPE
}

func buildToy(w *runtime.Weights) (runtime.Graph, error) {
	g := &toyGraph{rope: nn.NewRoPE(toyHD, 10000)}
	var err error
	for _, m := range []struct {
		dst        *mlxq.Matrix
		name       string
		rows, cols int
	}{{&g.embed, "toy.embed", toyV, toyH}, {&g.router, "toy.0.router", toyE, toyH},
		{&g.q, "toy.1.q", toyHeads * toyHD, toyH}, {&g.k, "toy.1.k", toyKV * toyHD, toyH},
		{&g.v, "toy.1.v", toyKV * toyHD, toyH}, {&g.o, "toy.1.o", toyH, toyHeads * toyHD}} {
		if *m.dst, err = w.Matrix(m.name, m.rows, m.cols); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *toyGraph) NewLayerStates(nn.Device) ([]runtime.LayerState, error) {
	return []runtime.LayerState{nil, nn.NewKVCache(toyKV*toyHD, toyKV*toyHD, toyW)}, nil
}

func (g *toyGraph) Forward(env runtime.Env, st []runtime.LayerState, pos int, tokens []int, opt *runtime.ForwardOptions) ([]float32, error) {
	T, H, be := len(tokens), toyH, env.Backend
	x := make([]float32, T*H)
	for t, tok := range tokens {
		g.embed.Row(x[t*H:(t+1)*H], tok)
	}
	R := make([]float32, T*toyE)
	be.MatMul(g.router, R, x, T)
	r := nn.NewRouting(T, toyK)
	nn.RouteSoftmaxTopK(r, R, T, toyE, true)
	out := make([]float32, T*H)
	moe := &nn.MoE{Device: nn.HostDevice{Backend: be}, Experts: env.Experts, Act: nn.SiLUGate}
	if err := moe.Run(0, nn.HostTensor(x), T, H, r, nil, nn.HostTensor(out)); err != nil {
		return nil, err
	}
	nn.AddTo(x, out)
	Q, K, V := make([]float32, T*toyHeads*toyHD), make([]float32, T*toyKV*toyHD), make([]float32, T*toyKV*toyHD)
	be.MatMul(g.q, Q, x, T)
	be.MatMul(g.k, K, x, T)
	be.MatMul(g.v, V, x, T)
	for t := range T {
		for h := range toyHeads {
			g.rope.Apply(Q[(t*toyHeads+h)*toyHD:(t*toyHeads+h+1)*toyHD], pos+t)
		}
		g.rope.Apply(K[t*toyHD:(t+1)*toyHD], pos+t)
	}
	O := make([]float32, T*toyHeads*toyHD)
	st[1].(*nn.KVCache).Attend(O, Q, K, V, T, nn.AttnDims{Heads: toyHeads, KVHeads: toyKV, HeadDim: toyHD, QStride: toyHD, Scale: 0.5})
	be.MatMul(g.o, out, O, T)
	nn.AddTo(x, out)
	logits := make([]float32, T*toyV)
	be.MatMul(g.embed, logits, x, T)
	return logits, nil
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func randVals(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.5)
	}
	return x
}

// toyExperts is an ExpertPrefetcher that records the protocol.
type toyExperts struct {
	w          [toyE][3][]float32
	mu         sync.Mutex
	prefetched []int
	asked      []int
	held       int
	err        error
}

func (s *toyExperts) Prefetch(l int, experts []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.asked) != 0 || s.held != 0 {
		s.err = errors.New("Prefetch after an Expert call")
	}
	if !slices.IsSorted(experts) {
		s.err = fmt.Errorf("Prefetch(%v) not ascending", experts)
	}
	s.prefetched = append(s.prefetched[:0], experts...)
}

func (s *toyExperts) Expert(l, e int) (*runtime.ExpertWeights, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, e)
	s.held++
	w := &runtime.ExpertWeights{Layer: l, Expert: e}
	var err error
	w.Gate, err = mlxq.NewDense(toyI, toyH, mlxq.F32, f32Bytes(s.w[e][0]))
	if err == nil {
		w.Up, err = mlxq.NewDense(toyI, toyH, mlxq.F32, f32Bytes(s.w[e][1]))
	}
	if err == nil {
		w.Down, err = mlxq.NewDense(toyH, toyI, mlxq.F32, f32Bytes(s.w[e][2]))
	}
	return w, err
}

func (s *toyExperts) Release(*runtime.ExpertWeights) {
	s.mu.Lock()
	s.held--
	s.mu.Unlock()
}

func (s *toyExperts) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		t.Fatal(s.err)
	}
	if !slices.Equal(s.asked, s.prefetched) {
		t.Fatalf("experts read %v, prefetched %v: want the same, in order", s.asked, s.prefetched)
	}
	if s.held != 0 {
		t.Fatalf("%d experts not released", s.held)
	}
	s.asked, s.prefetched = s.asked[:0], s.prefetched[:0]
}

// toyReference is the toy forward in float64, written from its definition
// (not from the blocks), for every token of a sequence.
func toyReference(ts runtime.MapTensors, ex *toyExperts, tokens []int) [][]float64 {
	mat := func(name string, rows, cols int) [][]float64 {
		d := ts[name+".weight"].Data
		m := make([][]float64, rows)
		for r := range m {
			m[r] = make([]float64, cols)
			for c := range m[r] {
				m[r][c] = float64(math.Float32frombits(binary.LittleEndian.Uint32(d[4*(r*cols+c):])))
			}
		}
		return m
	}
	mv := func(m [][]float64, x []float64) []float64 {
		y := make([]float64, len(m))
		for r := range m {
			for c, v := range m[r] {
				y[r] += v * x[c]
			}
		}
		return y
	}
	emb, router := mat("toy.embed", toyV, toyH), mat("toy.0.router", toyE, toyH)
	wq, wk, wv, wo := mat("toy.1.q", toyHeads*toyHD, toyH), mat("toy.1.k", toyHD, toyH), mat("toy.1.v", toyHD, toyH), mat("toy.1.o", toyH, toyHeads*toyHD)
	rope := func(x []float64, pos int) {
		half := toyHD / 2
		for i := range half {
			ang := float64(pos) * math.Pow(10000, -float64(2*i)/toyHD)
			a, b := x[i], x[i+half]
			x[i], x[i+half] = a*math.Cos(ang)-b*math.Sin(ang), b*math.Cos(ang)+a*math.Sin(ang)
		}
	}
	var keys, vals [][]float64
	var out [][]float64
	for pos, tok := range tokens {
		x := slices.Clone(emb[tok])
		p := mv(router, x)
		mx := slices.Max(p)
		var sum float64
		for i := range p {
			p[i] = math.Exp(p[i] - mx)
			sum += p[i]
		}
		idx := []int{0, 1, 2, 3, 4}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case p[a] > p[b]:
				return -1
			case p[a] < p[b]:
				return 1
			}
			return 0
		})
		top := idx[:toyK]
		var ksum float64
		for _, e := range top {
			ksum += p[e]
		}
		moe := make([]float64, toyH)
		for _, e := range top {
			f := func(i int) [][]float64 {
				m := make([][]float64, 0)
				rows, cols := toyI, toyH
				if i == 2 {
					rows, cols = toyH, toyI
				}
				for r := range rows {
					row := make([]float64, cols)
					for c := range row {
						row[c] = float64(ex.w[e][i][r*cols+c])
					}
					m = append(m, row)
				}
				return m
			}
			gt, up := mv(f(0), x), mv(f(1), x)
			for i := range gt {
				gt[i] = gt[i] / (1 + math.Exp(-gt[i])) * up[i]
			}
			y := mv(f(2), gt)
			for i := range moe {
				moe[i] += p[e] / ksum * y[i]
			}
		}
		for i := range x {
			x[i] += moe[i]
		}
		q, k, v := mv(wq, x), mv(wk, x), mv(wv, x)
		for h := range toyHeads {
			rope(q[h*toyHD:(h+1)*toyHD], pos)
		}
		rope(k, pos)
		keys, vals = append(keys, k), append(vals, v)
		o := make([]float64, toyHeads*toyHD)
		lo := max(0, pos-toyW+1)
		for h := range toyHeads {
			s := make([]float64, 0)
			for j := lo; j <= pos; j++ {
				var d float64
				for i := range toyHD {
					d += q[h*toyHD+i] * keys[j][i]
				}
				s = append(s, 0.5*d)
			}
			mx := slices.Max(s)
			var z float64
			for i := range s {
				s[i] = math.Exp(s[i] - mx)
				z += s[i]
			}
			for i, w := range s {
				for d := range toyHD {
					o[h*toyHD+d] += w / z * vals[lo+i][d]
				}
			}
		}
		att := mv(wo, o)
		for i := range x {
			x[i] += att[i]
		}
		out = append(out, mv(emb, x))
	}
	return out
}

func TestThirdArchitectureRegisters(t *testing.T) {
	if !slices.Contains(runtime.Registered(), toyType) || !slices.Contains(runtime.Registered(), runtime.TypeQwen3Next) {
		t.Fatalf("registered %v, want %s beside the qwen architectures", runtime.Registered(), toyType)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ts := runtime.MapTensors{}
	for _, m := range []struct {
		name       string
		rows, cols int
	}{{"toy.embed", toyV, toyH}, {"toy.0.router", toyE, toyH}, {"toy.1.q", toyHeads * toyHD, toyH},
		{"toy.1.k", toyKV * toyHD, toyH}, {"toy.1.v", toyKV * toyHD, toyH}, {"toy.1.o", toyH, toyHeads * toyHD}} {
		ts[m.name+".weight"] = runtime.DenseTensor{DType: "F32", Shape: []int64{int64(m.rows), int64(m.cols)}, Data: f32Bytes(randVals(r, m.rows*m.cols))}
	}
	ex := &toyExperts{}
	for e := range toyE {
		ex.w[e] = [3][]float32{randVals(r, toyI*toyH), randVals(r, toyI*toyH), randVals(r, toyH*toyI)}
	}
	cfg := &runtime.Config{ModelType: toyType, Vocab: toyV, Hidden: toyH, Layers: 2, Experts: toyE, TopK: toyK}
	m, err := runtime.NewModel(cfg, ts, ex, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{3, 7, 1, 10, 0, 3, 5, 9}
	want := toyReference(ts, ex, tokens)
	closeAll := func(what string, got []float32, want [][]float64) {
		t.Helper()
		for p := range want {
			for i, w := range want[p] {
				if d := math.Abs(float64(got[p*toyV+i]) - w); d > 1e-4*(1+math.Abs(w)) {
					t.Fatalf("%s: token %d logit %d = %g, reference %g", what, p, i, got[p*toyV+i], w)
				}
			}
		}
	}
	// The whole sequence at once (longer than the window)...
	all, err := m.Forward(m.NewState(), tokens, &runtime.ForwardOptions{AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	ex.check(t)
	closeAll("one chunk", all, want)
	// ...token by token past the window, and in chunks of 3 after a
	// snapshot taken at 2 and restored into a fresh state.
	st := m.NewState()
	var inc []float32
	var sn *runtime.Snapshot
	for i, tok := range tokens {
		row, err := m.Forward(st, []int{tok}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ex.check(t)
		inc = append(inc, row...)
		if i == 1 {
			sn = st.Snapshot()
		}
	}
	closeAll("token by token", inc, want)
	st2 := m.NewState()
	if err := st2.Restore(sn); err != nil {
		t.Fatal(err)
	}
	var chunked []float32
	for i := 2; i < len(tokens); i += 3 {
		rows, err := m.Forward(st2, tokens[i:min(i+3, len(tokens))], &runtime.ForwardOptions{AllLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		chunked = append(chunked, rows...)
	}
	closeAll("restored, in chunks", chunked, want[2:])

	// A model type nobody registered is refused by name.
	_, err = runtime.NewModel(&runtime.Config{ModelType: "nobody_moe"}, ts, ex, nil)
	var ue *runtime.UnsupportedArchError
	if !errors.As(err, &ue) || ue.ModelType != "nobody_moe" {
		t.Fatalf("unregistered model type: err = %v, want an UnsupportedArchError naming it", err)
	}
}
