package devicetest

import (
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// The suite can fail: each mutant below is the host device with one
// contract bug, and Ops must fail in the subtest that covers it. Each
// mutant runs in a child process (a failing Ops fails its test).

type mutant struct {
	dev     func() nn.Device
	failsIn string // the Ops subtest that must fail
}

var mutants = map[string]mutant{
	"matmul-last-column": {func() nn.Device { return mmLastCol{} }, "MatMul"},
	"rope-position":      {func() nn.Device { return ropeOff{} }, "RoPE"},
	"window-off-by-one":  {func() nn.Device { return windowOff{} }, "Attention"},
	"route-ties-high":    {func() nn.Device { return routeHigh{} }, "Route"},
	"norm-offset-kind":   {func() nn.Device { return normKind{} }, "RMSNorm"},
	"lazy-expert":        {func() nn.Device { return &Strict{host: nn.HostDevice{}, lazyExperts: true} }, "Expert"},
	"temp-not-zeroed":    {func() nn.Device { return &dirtyTemp{} }, "Temp"},
	"kv-clone-shared":    {func() nn.Device { return cloneShared{} }, "KVState"},
	"deltanet-no-state":  {func() nn.Device { return dnForget{} }, "DeltaNet"},
	"glu-gelu-as-silu":   {func() nn.Device { return gluSiLU{} }, "GLU"},
	"combine-adds":       {func() nn.Device { return combineAdds{} }, "Combine"},
	"matmul-noise":       {func() nn.Device { return &noisy{} }, "Determinism"},
	"gather-rows-off":    {func() nn.Device { return rowsOff{} }, "GatherScatterRows"},
	"addnorm-before-add": {func() nn.Device { return normFirst{} }, "AddRMSNorm"},
	"matmuls-drop-last":  {func() nn.Device { return dropLast{} }, "MatMuls"},
	"select-drops-ties":  {func() nn.Device { return selectAbove{} }, "SelectTop"},
}

// selectAbove implements nn.TopSelector wrongly: ids above the k-th
// largest only, its ties dropped.
type selectAbove struct{ nn.HostDevice }

func (d selectAbove) SelectsTop(n, k int) bool { return true }

func (d selectAbove) SelectTop(c *nn.TopLogits, x nn.Tensor, n, k int) (bool, error) {
	if !nn.SelectTopRef(c, nn.F32(x)[:n], k, 0) {
		return false, nil
	}
	ids, logits := c.IDs[:0], c.Logits[:0]
	for j, v := range c.Logits {
		if v > c.Th {
			ids, logits = append(ids, c.IDs[j]), append(logits, v)
		}
	}
	c.IDs, c.Logits = ids, logits
	return true, nil
}

// normFirst implements nn.ResidualNormer wrongly: the norm of x before the
// add.
type normFirst struct{ nn.HostDevice }

func (d normFirst) AddRMSNorm(x, r, y, w nn.Tensor, s nn.NormSpec) {
	d.HostDevice.RMSNorm(y, x, w, s)
	d.HostDevice.Add(x, r, s.Rows*s.Width)
}

// dropLast implements nn.SharedMatMuler and forgets its last product when
// it has several.
type dropLast struct{ nn.HostDevice }

func (d dropLast) MatMuls(x nn.Tensor, n int, ps []nn.Product) {
	if len(ps) > 1 {
		ps = ps[:len(ps)-1]
	}
	for _, p := range ps {
		d.HostDevice.MatMul(p.W, p.Y, x, n)
	}
}

func TestSuiteCatchesBugs(t *testing.T) {
	if os.Getenv("DEVICETEST_MUTANT") != "" {
		t.Skip("in a mutant's child process")
	}
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutantChild$", "-test.v")
			cmd.Env = append(os.Environ(), "DEVICETEST_MUTANT="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("Ops passed on mutant %s:\n%s", name, tail(out))
			}
			if want := "--- FAIL: TestMutantChild/" + m.failsIn + " "; !strings.Contains(string(out), want) {
				t.Fatalf("mutant %s: Ops did not fail in %s:\n%s", name, m.failsIn, tail(out))
			}
		})
	}
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}

func TestMutantChild(t *testing.T) {
	name := os.Getenv("DEVICETEST_MUTANT")
	if name == "" {
		t.Skip("only in TestSuiteCatchesBugs' child processes")
	}
	Ops(t, mutants[name].dev(), DefaultTolerances())
}

type mmLastCol struct{ nn.HostDevice }

func (d mmLastCol) MatMul(w nn.Mat, y, x nn.Tensor, n int) {
	X := append([]float32(nil), nn.F32(x)...)
	for i := range n {
		X[(i+1)*w.W.Cols-1] = 0
	}
	d.HostDevice.MatMul(w, y, nn.HostTensor(X), n)
}

type ropeOff struct{ nn.HostDevice }

func (d ropeOff) RoPE(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) {
	s.Pos0++
	d.HostDevice.RoPE(x, r, s)
}

type windowOff struct{ nn.HostDevice }

func (d windowOff) NewKV(kw, vw, window int) (nn.KVState, error) {
	if window > 0 {
		window++
	}
	return d.HostDevice.NewKV(kw, vw, window)
}

type routeHigh struct{ nn.HostDevice }

func (routeHigh) Route(r nn.Routing, logits nn.Tensor, T, E int, norm bool) error {
	L := nn.F32(logits)
	for t := range T { // reversed experts: ties go to the higher index
		row := L[t*E : (t+1)*E]
		for i, j := 0, E-1; i < j; i, j = i+1, j-1 {
			row[i], row[j] = row[j], row[i]
		}
	}
	nn.RouteSoftmaxTopK(r, L[:T*E], T, E, norm)
	for i := range r.Sel[:T*r.K] {
		r.Sel[i] = E - 1 - r.Sel[i]
	}
	return nil
}

type normKind struct{ nn.HostDevice }

func (d normKind) RMSNorm(y, x, w nn.Tensor, s nn.NormSpec) {
	if s.Kind == nn.NormOffset {
		s.Kind = nn.NormWeight
	}
	d.HostDevice.RMSNorm(y, x, w, s)
}

type dirtyTemp struct {
	nn.HostDevice
	pool []float32
}

func (d *dirtyTemp) Temp(n int) nn.Tensor {
	if len(d.pool) < n {
		d.pool = make([]float32, n)
	}
	return nn.HostTensor(d.pool[:n]) // reused without clearing
}

type cloneShared struct{ nn.HostDevice }

type sharedKV struct{ *nn.KVCache }

func (k sharedKV) Clone() nn.LayerState { return k } // not independent

func (d cloneShared) NewKV(kw, vw, window int) (nn.KVState, error) {
	return sharedKV{nn.NewKVCache(kw, vw, window)}, nil
}

func (d cloneShared) Attention(kv nn.KVState, O, Q, K, V nn.Tensor, T int, a nn.AttnDims) {
	d.HostDevice.Attention(kv.(sharedKV).KVCache, O, Q, K, V, T, a)
}

type dnForget struct{ nn.HostDevice }

func (d dnForget) DeltaNet(st nn.TensorState, a *nn.DeltaNetArgs) {
	clear(nn.F32(st.Tensor(1))) // the recurrent state lost between calls
	d.HostDevice.DeltaNet(st, a)
}

type gluSiLU struct{ nn.HostDevice }

func (d gluSiLU) GLU(_ nn.Activation, y, gate, up nn.Tensor, n int) {
	d.HostDevice.GLU(nn.SiLUGate, y, gate, up, n)
}

type combineAdds struct{ nn.HostDevice }

func (d combineAdds) Combine(out, res nn.Tensor, wts []float32, T, k, width int) {
	O := nn.F32(out)
	keep := append([]float32(nil), O[:T*width]...)
	d.HostDevice.Combine(out, res, wts, T, k, width)
	for i, v := range keep {
		O[i] += v
	}
}

type noisy struct {
	nn.HostDevice
	n uint32
}

func (d *noisy) MatMul(w nn.Mat, y, x nn.Tensor, n int) {
	d.HostDevice.MatMul(w, y, x, n)
	d.n++
	Y := nn.F32(y)
	Y[0] = math.Float32frombits(math.Float32bits(Y[0]) + d.n%2) // one ulp, every other call
}

type rowsOff struct{ nn.HostDevice }

func (d rowsOff) GatherRows(dst, src nn.Tensor, rows []int, width int) {
	d.HostDevice.GatherRows(dst, src, rows, width-1) // the last column dropped
}

// Models catches a device that breaks the expert rule: with the one-slot
// expert cache, the slot holds the next expert's bytes by the time the
// lazy device runs its queue.
func TestModelsCatchLazyExperts(t *testing.T) {
	if os.Getenv("DEVICETEST_MUTANT") != "" {
		t.Skip("in a mutant's child process")
	}
	if _, err := TinyDir(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestModelsMutantChild$", "-test.v")
	cmd.Env = append(os.Environ(), "DEVICETEST_MUTANT=lazy-expert")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("Models passed on a device that reads expert bytes after Release:\n%s", tail(out))
	}
	if want := "one-slot expert cache against every expert resident: step"; !strings.Contains(string(out), want) {
		t.Fatalf("Models did not fail where the expert rule is checked:\n%s", tail(out))
	}
	// Only there: the checkpoint, with every expert resident, is right.
	if strings.Contains(string(out), "prompt logits against CPU: element") {
		t.Fatalf("the lazy device failed before the one-slot cache:\n%s", tail(out))
	}
}

func TestModelsMutantChild(t *testing.T) {
	if os.Getenv("DEVICETEST_MUTANT") != "lazy-expert" {
		t.Skip("only in TestModelsCatchLazyExperts' child process")
	}
	Models(t, &StrictBackend{Backend: nn.CPU{}, Dev: &Strict{lazyExperts: true}})
}
