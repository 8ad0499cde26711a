package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	_ "github.com/qpack-go/qpack/runtime/models/all"
	"github.com/qpack-go/qpack/runtime/nn"
)

const tinyDir = "../testdata/tiny"

// tinyModels lists testdata/tiny (every model there, so a new one is
// covered without editing this test).
func tinyModels(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(tinyDir, e.Name(), "config.json")); err == nil {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no tiny models")
	}
	if os.Getenv("QPACK_CUDA_TINY_ONE") != "" {
		// Under compute-sanitizer (testdata/cuda/device.sh): one
		// quantized model per architecture covers every kernel the
		// layer path launches, in a time the tools allow.
		seen := map[string]bool{}
		var one []string
		for _, n := range names {
			arch, _, _ := strings.Cut(n, "-")
			if !seen[arch] && !strings.HasSuffix(n, "-f32") {
				seen[arch] = true
				one = append(one, n)
			}
		}
		names = one
	}
	return names
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// compareTiny runs each tiny model on b's Layer and on the CPU: a prompt
// (all logits, every layer's hidden state), then decoding token by token,
// then a snapshot restored and the same token again. tol(name) is the
// bound on the logits' max abs difference (0: bit-identical); the greedy
// tokens must agree everywhere.
// open gives the backend for a model (a new one or a shared one: a closed
// model's weights and experts leave the backend with its arena).
func compareTiny(t *testing.T, open func(t *testing.T) *Backend, tol func(name string) float64, only ...string) {
	for _, name := range tinyModels(t) {
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b := open(t)
			s0 := b.Stats()
			ref, m := loadBoth(t, name, b)
			if _, ok := m.Device().(*Layer); !ok {
				t.Fatalf("the model runs on %s, not the cuda layer device", m.Device().Name())
			}
			bound := tol(name)
			V := m.Config.Vocab
			prompt := make([]int, 9)
			for i := range prompt {
				prompt[i] = (7*i + 3) % V
			}
			check := func(what string, got, want []float32) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
				}
				d := maxDiff(got, want)
				if !(d <= bound) {
					t.Fatalf("%s: logits max abs difference %.3g > %.3g", what, d, bound)
				}
				for p := range len(want) / V {
					if g, w := argmax(got[p*V:(p+1)*V]), argmax(want[p*V:(p+1)*V]); g != w {
						t.Fatalf("%s: greedy token at row %d: %d, cpu %d", what, p, g, w)
					}
				}
			}
			var hiddenDiff float64
			hw := map[int][]float32{}
			opt := func(save bool) *runtime.ForwardOptions {
				return &runtime.ForwardOptions{AllLogits: true, LayerHook: func(l int, h []float32) {
					if save {
						hw[l] = append([]float32(nil), h...)
					} else {
						hiddenDiff = max(hiddenDiff, maxDiff(h, hw[l]))
					}
				}}
			}
			rs, st := ref.NewState(), m.NewState()
			want, err := ref.Forward(rs, prompt, opt(true))
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Forward(st, prompt, opt(false))
			if err != nil {
				t.Fatal(err)
			}
			check("prompt", got, want)
			worst := maxDiff(got, want)
			// Decode, with a snapshot after the first token.
			var snapRef, snap *runtime.Snapshot
			for i := range 4 {
				tok := argmax(want[len(want)-V:])
				if want, err = ref.Forward(rs, []int{tok}, nil); err != nil {
					t.Fatal(err)
				}
				if got, err = m.Forward(st, []int{tok}, nil); err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("decode %d", i), got, want)
				worst = max(worst, maxDiff(got, want))
				if i == 0 {
					snapRef, snap = rs.Snapshot(), st.Snapshot()
				}
			}
			if err := rs.Restore(snapRef); err != nil {
				t.Fatal(err)
			}
			if err := st.Restore(snap); err != nil {
				t.Fatal(err)
			}
			if want, err = ref.Forward(rs, []int{1}, nil); err != nil {
				t.Fatal(err)
			}
			if got, err = m.Forward(st, []int{1}, nil); err != nil {
				t.Fatal(err)
			}
			check("after Restore", got, want)
			worst = max(worst, maxDiff(got, want))
			s := b.Stats()
			s.HostOps -= s0.HostOps
			s.Launches -= s0.Launches
			s.Fallbacks -= s0.Fallbacks
			s.ExpertHits -= s0.ExpertHits
			s.ExpertMisses -= s0.ExpertMisses
			s.ExpertBytes -= s0.ExpertBytes
			if b.Layer().kernels && s.HostOps != 0 || s.Fallbacks != 0 {
				t.Errorf("%d layer ops on the host path, %d CPU fallbacks", s.HostOps, s.Fallbacks)
			}
			t.Logf("%s: logits max abs difference %.3g (bound %.3g), hidden states %.3g; host ops %d, launches %d, experts %d hits %d misses, %d bytes copied",
				name, worst, bound, hiddenDiff, s.HostOps, s.Launches, s.ExpertHits, s.ExpertMisses, s.ExpertBytes)
		})
	}
}

// On the fake device the kernels are the CPU's arithmetic (fakedev_test.go),
// so the layer device must reproduce the CPU backend bit for bit, on the
// kernel path (addresses, extents, index uploads, the KV rows) and on the
// host path alike: everything else (tensors, staging, states, the expert
// cache, Temp reuse) is this package's host logic.
func TestLayerTinyModelsFake(t *testing.T) {
	for _, kernels := range []bool{true, false} {
		t.Run(map[bool]string{true: "kernels", false: "host"}[kernels], func(t *testing.T) {
			// One backend for every model, as on the GPU.
			b, f := fakeBackend(t)
			b.fuse = fuseAll // every fusion, counted below
			b.Layer().kernels = kernels
			compareTiny(t, func(*testing.T) *Backend { return b }, func(string) float64 { return 0 })
			all := b.Stats()
			if all.ExpertMisses == 0 || all.ExpertHits+all.RoutedLayers == 0 {
				t.Errorf("expert cache unused: %+v", all)
			}
			if kernels != (all.HostOps == 0) {
				t.Errorf("kernels %v: %d ops on the host", kernels, all.HostOps)
			}
			// Once a layer's experts are all in the device cache, its
			// decode steps route on the device (bit for bit the CPU's
			// logits above, on the fake); the host path never does.
			if kernels != (all.RoutedLayers > 0) {
				t.Errorf("kernels %v: %d layers routed on the device", kernels, all.RoutedLayers)
			}
			// Decode steps fuse their one-row residual norms into the
			// products that read them (layer_normfuse.go); the host path
			// never does.
			// So do the DeltaNet's gated output norms (qwen models); the
			// attention layers' q and k norms take their RoPE along, their
			// keys and values go to the cache in one launch, and the Qwen
			// output gate goes into the output projection.
			fused, gated, attn, sigmul := 0, 0, 0, 0
			for _, k := range f.launches {
				if strings.HasSuffix(k, "_set_norm") {
					fused++
				}
				if strings.HasSuffix(k, "_set_gnorm") {
					gated++
				}
				if k == "scatter_rows2" || k == "rms_norm_rope" || strings.HasSuffix(k, "_set_sigmul") {
					attn++
				}
				if strings.HasSuffix(k, "_set_sigmul") {
					sigmul++
				}
			}
			if kernels != (fused > 0) || kernels != (gated > 0) || kernels != (attn > 0) || kernels != (sigmul > 0) {
				t.Errorf("kernels %v: %d fused norm launches, %d fused gated norms, %d fused launches of attention layers", kernels, fused, gated, attn)
			}
			// The models are closed: their weights, experts and states
			// have left the device; what is left is the Layer's arena and
			// the few KB of RoPE frequencies and index vectors, which stay
			// until Close.
			goruntime.GC() // the states' cleanups queue their memory,
			goruntime.GC()
			if err := b.Layer().EndPass(); err != nil { // which EndPass frees
				t.Fatal(err)
			}
			l := b.Layer()
			var left int64
			for _, n := range l.owned {
				left += n
			}
			if arena := 4 * int64(l.temp.chunks[0].n); left-arena > 64<<10 || len(l.experts.slots) != 0 {
				t.Errorf("after every model closed: %d bytes of device memory owned (arena %d), %d experts cached, %d device bytes in use",
					left, arena, len(l.experts.slots), f.inUse)
			}
		})
	}
}

// The same on a GPU: within 1e-4 for float32 weights, 1e-3 quantized.
func TestLayerTinyModelsGPU(t *testing.T) {
	b := openOrSkip(t) // one backend for every model (one NVRTC compile)
	compareTiny(t, func(*testing.T) *Backend { return b }, func(name string) float64 {
		if strings.HasSuffix(name, "-f32") {
			return 1e-4
		}
		return 1e-3
	})
}

func layerOf(t *testing.T) (*Layer, *fakeDev) {
	b, f := fakeBackend(t)
	l, ok := b.LayerDevice().(*Layer)
	if !ok || l != b.LayerDevice() {
		t.Fatal("LayerDevice is not one *Layer")
	}
	return l, f
}

// bothPaths runs test on the kernel path and on the host path.
func bothPaths(t *testing.T, test func(t *testing.T, l *Layer)) {
	for _, kernels := range []bool{true, false} {
		t.Run(map[bool]string{true: "kernels", false: "host"}[kernels], func(t *testing.T) {
			l, _ := layerOf(t)
			l.kernels = kernels
			test(t, l)
		})
	}
}

func put(t *testing.T, l *Layer, x []float32) nn.Tensor {
	t.Helper()
	d := l.Temp(len(x))
	l.Write(d, x)
	return d
}

func get(t *testing.T, l *Layer, x nn.Tensor) []float32 {
	t.Helper()
	out := make([]float32, x.N)
	if err := l.Read(out, x); err != nil {
		t.Fatal(err)
	}
	return out
}

// Attention over the device cache matches nn.KVCache bit for bit, full
// and windowed (chunks longer than the window included), across growth,
// Clone, Restore and Reset.
func TestLayerAttentionStates(t *testing.T) {
	bothPaths(t, testLayerAttentionStates)
}

func testLayerAttentionStates(t *testing.T, l *Layer) {
	r := rand.New(rand.NewPCG(3, 4))
	d := nn.AttnDims{Heads: 4, KVHeads: 2, HeadDim: 8, QStride: 16, VDim: 6, Scale: 0.3}
	kw, vw := 2*8, 2*6
	for _, window := range []int{0, 5} {
		ref := nn.NewKVCache(kw, vw, window)
		kv, err := l.NewKV(kw, vw, window)
		if err != nil {
			t.Fatal(err)
		}
		var snap nn.LayerState
		var refSnap nn.LayerState
		chunks := []int{3, 1, 7, 1, 60, 2, 1}
		for i, T := range chunks {
			Q, K, V := randVec(r, T*4*16, 1), randVec(r, T*kw, 1), randVec(r, T*vw, 1)
			want := make([]float32, T*4*6)
			ref.Attend(want, Q, K, V, T, d)
			O := l.Temp(T * 4 * 6)
			l.Attention(kv, O, put(t, l, Q), put(t, l, K), put(t, l, V), T, d)
			sameBits(t, fmt.Sprintf("window %d chunk %d", window, i), get(t, l, O), want)
			if kv.Len() != ref.Len() {
				t.Fatalf("Len %d, want %d", kv.Len(), ref.Len())
			}
			if err := l.EndPass(); err != nil {
				t.Fatal(err)
			}
			if i == 2 {
				snap, refSnap = kv.Clone(), ref.Clone()
			}
		}
		if !kv.Restore(snap) || !ref.Restore(refSnap) {
			t.Fatal("Restore failed")
		}
		if kv.Restore(nn.NewKVCache(kw, vw, window)) {
			t.Fatal("Restore from a host cache succeeded")
		}
		for pass := range 2 {
			T := 2
			Q, K, V := randVec(r, T*4*16, 1), randVec(r, T*kw, 1), randVec(r, T*vw, 1)
			want := make([]float32, T*4*6)
			ref.Attend(want, Q, K, V, T, d)
			O := l.Temp(T * 4 * 6)
			l.Attention(kv, O, put(t, l, Q), put(t, l, K), put(t, l, V), T, d)
			sameBits(t, fmt.Sprintf("window %d after restore/reset %d", window, pass), get(t, l, O), want)
			if err := l.EndPass(); err != nil {
				t.Fatal(err)
			}
			kv.Reset()
			ref.Reset()
		}
		if window > 0 && kv.Bytes() != 4*int64(window*(kw+vw)) {
			t.Errorf("ring Bytes %d", kv.Bytes())
		}
	}
}

// TensorState: Reset zeroes, Clone is independent, Restore copies back and
// refuses another shape.
func TestLayerTensorState(t *testing.T) {
	l, _ := layerOf(t)
	st, err := l.NewTensors(5, 3)
	if err != nil {
		t.Fatal(err)
	}
	l.Write(st.Tensor(0), []float32{1, 2, 3, 4, 5})
	c := st.Clone()
	l.Write(st.Tensor(0), []float32{9})
	sameBits(t, "clone", get(t, l, c.(nn.TensorState).Tensor(0)), []float32{1, 2, 3, 4, 5})
	if !st.Restore(c) {
		t.Fatal("Restore failed")
	}
	sameBits(t, "restored", get(t, l, st.Tensor(0)), []float32{1, 2, 3, 4, 5})
	other, _ := l.NewTensors(5, 4)
	if st.Restore(other) {
		t.Fatal("Restore from another shape succeeded")
	}
	st.Reset()
	sameBits(t, "reset", get(t, l, st.Tensor(0)), make([]float32, 5))
	if st.Bytes() != 32 {
		t.Errorf("Bytes %d", st.Bytes())
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
}

// Temps are zeroed, and a pass that outgrows the arena leaves one chunk of
// the total behind, which the next pass of the same shape reuses without
// allocating.
func TestLayerTempReuse(t *testing.T) {
	l, f := layerOf(t)
	pass := func() {
		a := l.Temp(100)
		l.Write(a, randVec(rand.New(rand.NewPCG(1, 1)), 100, 1))
		big := l.Temp(3 << 20) // past the first 4 MiB chunk
		for _, x := range [][]float32{get(t, l, big)[:10], get(t, l, l.Temp(7))} {
			for _, v := range x {
				if v != 0 {
					t.Fatal("a Temp is not zeroed")
				}
			}
		}
		if err := l.EndPass(); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	// 4 MiB, then 12 MiB for the big one, then one more for the last.
	if len(l.temp.chunks) != 1 || l.temp.grows != 3 {
		t.Fatalf("after the first pass: %d chunks, %d grows", len(l.temp.chunks), l.temp.grows)
	}
	f.log, f.calls = true, nil
	pass()
	pass()
	for _, c := range f.calls {
		if strings.HasPrefix(c, "memAlloc") {
			t.Fatalf("a pass of the same shape allocated: %v", f.calls)
		}
	}
	if l.temp.grows != 3 || len(l.temp.chunks) != 1 {
		t.Fatalf("grows %d, %d chunks", l.temp.grows, len(l.temp.chunks))
	}
}

// The arena grows by what it holds (it doubles), takes only what a Temp
// needs when the device has no room to double, and leaves one chunk of
// what the pass took, not of what it reserved.
func TestLayerTempGrowth(t *testing.T) {
	l, f := layerOf(t)
	const mib = 1 << 20
	chunks := func() []int64 {
		var s []int64
		for _, c := range l.temp.chunks {
			s = append(s, 4*int64(c.n)/mib)
		}
		return s
	}
	l.Temp(mib / 4)     // 1 MiB in the first chunk (4 MiB)
	l.Temp(mib)         // 4 MiB: a chunk as large as the arena
	l.Temp(3 * mib)     // 12 MiB: more than the arena holds, a chunk of 12
	l.Temp(mib / 4 * 3) // 3 MiB: fits the second chunk? no (4 used): a chunk of 20, the arena's size
	if got := chunks(); !slices.Equal(got, []int64{4, 4, 12, 20}) {
		t.Fatalf("chunks of %v MiB, want [4 4 12 20]", got)
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	// One chunk of what the pass took (1 + 4 + 12 + 3 = 20 MiB), not of
	// the 40 it had reserved.
	if got := chunks(); !slices.Equal(got, []int64{20}) {
		t.Fatalf("after the pass: chunks of %v MiB, want [20]", got)
	}
	// A device with room for a Temp but not for doubling the arena.
	f.limit = f.inUse + 8*mib
	l.Temp(4 * mib)      // 16 MiB of the 20
	l.Temp(mib)          // the last 4
	x := l.Temp(mib / 2) // 2 MiB: doubling (20) has no room, 2 has
	if got := chunks(); x.N != mib/2 || !slices.Equal(got, []int64{20, 2}) {
		t.Fatalf("near the device's limit: chunks of %v MiB, want [20 2]", got)
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	if got := chunks(); !slices.Equal(got, []int64{22}) {
		t.Fatalf("after the pass near the limit: chunks of %v MiB, want [22]", got)
	}
}

// A Temp the device has no memory for fails the pass with an error that
// is ErrOutOfMemory (the CLI's hint), naming the Temp and its size.
func TestLayerOutOfMemoryError(t *testing.T) {
	l, f := layerOf(t)
	f.limit = f.inUse + 1<<20
	l.Temp(1 << 20) // 4 MiB
	err := l.EndPass()
	if !errors.Is(err, ErrOutOfMemory) || errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "Temp(1048576)") {
		t.Fatalf("EndPass: %v", err)
	}
}

// Staging: many Writes queue copies in one staging buffer without
// waiting until it is full; a wait makes it reusable.
func TestLayerStaging(t *testing.T) {
	t.Setenv(mappedUploadsEnv, "0") // Write through staging and a copy (the mapped path: TestMappedUploadsFake)
	l, f := layerOf(t)
	x := l.Temp(1 << 20) // 4 MiB
	f.log, f.calls = true, nil
	src := randVec(rand.New(rand.NewPCG(5, 6)), 1000, 1)
	for i := range 10 {
		l.Write(x.Slice(i*1000, (i+1)*1000), src)
	}
	for _, c := range f.calls {
		if c == "sync" {
			t.Fatalf("small Writes waited: %v", f.calls)
		}
	}
	if l.stageOff != 10*4096 {
		t.Fatalf("staging offset %d, want %d (256-aligned slots)", l.stageOff, 10*4096)
	}
	sameBits(t, "write", get(t, l, x.Slice(9000, 10000)), src)
	if l.stageOff != 0 {
		t.Fatalf("staging offset %d after a wait", l.stageOff)
	}
	// A Write larger than the staging waits and grows it.
	l.Write(x, make([]float32, 1<<20))
	if len(l.stage) < 4<<20 {
		t.Fatalf("staging %d bytes", len(l.stage))
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
}

// Errors: a failing device call inside an op is returned by the next wait,
// later ops are skipped, EndPass clears it; out of memory names what and
// how much.
func TestLayerErrors(t *testing.T) {
	l, f := layerOf(t)
	r := rand.New(rand.NewPCG(7, 8))
	m := makeMatrix(t, r, matCase{16, 64, 4, 32, mlxq.BF16})
	mat, err := l.Resident(m)
	if err != nil {
		t.Fatal(err)
	}
	x := put(t, l, randVec(r, 64, 1))
	y := l.Temp(16)
	f.fail = &Error{Call: "cuLaunchKernel", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS"}
	l.MatMul(mat, y, x, 1)
	f.fail = nil
	f.log, f.calls = true, nil
	l.Add(y, y, 16)
	l.MatMul(mat, y, x, 1)
	if len(f.calls) != 0 {
		t.Fatalf("ops after an error reached the device: %v", f.calls)
	}
	if err := l.Flush(); !errors.Is(err, f.fail) && (err == nil || !strings.Contains(err.Error(), "ILLEGAL_ADDRESS")) {
		t.Fatalf("Flush: %v", err)
	}
	if err := l.Read(make([]float32, 16), y); err == nil || !strings.Contains(err.Error(), "MatMul") {
		t.Fatalf("Read after a failed MatMul: %v", err)
	}
	if err := l.Route(nn.NewRouting(1, 1), y, 1, 16, true); err == nil {
		t.Fatal("Route after an error succeeded")
	}
	if _, err := l.Expert(testSrc, &nn.ExpertWeights{Gate: m, Up: m, Down: m}); err == nil {
		t.Fatal("Expert after an error succeeded")
	}
	if err := l.EndPass(); err == nil {
		t.Fatal("EndPass did not return the error")
	}
	if err := l.EndPass(); err != nil {
		t.Fatalf("a second EndPass: %v", err)
	}
	// The device is usable again.
	x = put(t, l, randVec(r, 64, 1))
	y = l.Temp(16)
	l.MatMul(mat, y, x, 1)
	checkMatMul(t, "after the error", m, get(t, l, x), get(t, l, y), 1)

	// A failing download surfaces from Read.
	f.failCall["dtoh"] = &Error{Call: "cuMemcpyDtoHAsync_v2", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}
	if err := l.Read(make([]float32, 16), y); err == nil {
		t.Fatal("Read with a failing copy succeeded")
	}
	delete(f.failCall, "dtoh")
	if err := l.EndPass(); err == nil {
		t.Fatal("EndPass lost the Read error")
	}

	// Out of device memory.
	f.limit = f.inUse + 1000
	if _, err := l.Alloc(1 << 20); err == nil || !strings.Contains(err.Error(), "Alloc(1048576 floats)") || !strings.Contains(err.Error(), "4194304 bytes") {
		t.Fatalf("Alloc past the limit: %v", err)
	}
	if _, err := l.Resident(makeMatrix(t, r, matCase{64, 512, 8, 64, mlxq.F16})); err == nil || !strings.Contains(err.Error(), "resident [64, 512] matrix") {
		t.Fatalf("Resident past the limit: %v", err)
	}
	big := l.Temp(1 << 22)
	l.Scale(big, 2, 1<<22)
	if err := l.EndPass(); err == nil || !strings.Contains(err.Error(), "Temp(4194304)") {
		t.Fatalf("EndPass after a Temp past the limit: %v", err)
	}
	f.limit = 0
}

// The device expert cache: misses copy on the copy stream and wait; hits
// are served by CachedExpert and Expert; the least recently used slot not
// in use since the last Flush is reused (after an event wait on the
// compute stream), the budget is kept at EndPass.
func TestLayerExpertCache(t *testing.T) {
	l, f := layerOf(t)
	b := l.b
	r := rand.New(rand.NewPCG(9, 10))
	mk := func(layer, e int, pinned bool) *nn.ExpertWeights {
		g := makeMatrix(t, r, matCase{32, 64, 4, 32, mlxq.BF16})
		u := makeMatrix(t, r, matCase{32, 64, 4, 32, mlxq.BF16})
		d := makeMatrix(t, r, matCase{64, 32, 8, 32, mlxq.BF16})
		if pinned {
			g, u, d = inAlloc(t, b, g), inAlloc(t, b, u), inAlloc(t, b, d)
		}
		return &nn.ExpertWeights{Layer: layer, Expert: e, Gate: g, Up: u, Down: d}
	}
	size := matBytes(mk(0, 0, false).Gate)*2 + matBytes(mk(0, 0, false).Down)
	b.SetExpertCacheBytes(2 * size)
	ws := []*nn.ExpertWeights{mk(0, 0, true), mk(0, 1, false), mk(1, 0, false)}
	use := func(w *nn.ExpertWeights, mats nn.ExpertMats) {
		x := randVec(r, 64, 1)
		y := l.Temp(32)
		l.MatMul(mats.Gate, y, put(t, l, x), 1)
		checkMatMul(t, fmt.Sprintf("expert %d/%d", w.Layer, w.Expert), w.Gate, x, get(t, l, y), 1)
	}
	f.log = true
	for _, w := range ws[:2] {
		f.calls = nil
		mats, err := l.Expert(testSrc, w)
		if err != nil {
			t.Fatal(err)
		}
		var copies, waits int
		for _, c := range f.calls {
			copies += strings.Count(c, "htodOn1") // the copy stream
			if strings.HasPrefix(c, "eventSync") {
				waits++
			}
		}
		if copies != 9 || waits != 1 {
			t.Fatalf("a miss: %d copies on the copy stream, %d waits: %v", copies, waits, f.calls)
		}
		use(w, mats)
	}
	if s := b.Stats(); s.ExpertMisses != 2 || s.ExpertBytes != 2*(size-3*0) && s.ExpertBytes <= 0 {
		t.Fatalf("stats %+v", s)
	}
	if mats, ok := l.CachedExpert(testSrc, 0, 1); !ok {
		t.Fatal("CachedExpert missed a held expert")
	} else {
		use(ws[1], mats)
	}
	// Both slots are in use in this generation: a third expert goes over
	// budget instead of evicting.
	if _, err := l.Expert(testSrc, ws[2]); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.ExpertEvicts != 0 {
		t.Fatalf("evicted a slot in use: %+v", s)
	}
	if err := l.EndPass(); err != nil { // shrinks to two slots: (0,0) goes
		t.Fatal(err)
	}
	if _, ok := l.CachedExpert(testSrc, 0, 0); ok {
		t.Fatal("the least recently used expert survived the shrink")
	}
	if _, ok := l.CachedExpert(testSrc, 1, 0); !ok {
		t.Fatal("a recent expert was dropped")
	}
	if err := l.Flush(); err != nil { // (1,0) is no longer in use
		t.Fatal(err)
	}
	// (0,1) is the least recently used now: its slot is reused, after the
	// copy stream waited for the compute stream.
	f.calls = nil
	mats, err := l.Expert(testSrc, ws[0])
	if err != nil {
		t.Fatal(err)
	}
	use(ws[0], mats)
	log := strings.Join(f.calls, " ")
	if !strings.Contains(log, "record2 0 wait1 2") || strings.Contains(log, "memAlloc") {
		t.Fatalf("slot reuse: %v", f.calls)
	}
	if _, ok := l.CachedExpert(testSrc, 0, 1); ok {
		t.Fatal("the evicted expert is still cached")
	}
	// Another source (another model on this backend) never sees these.
	if _, ok := l.CachedExpert(&nullSource{}, 0, 0); ok {
		t.Fatal("another source's expert served from the cache")
	}
	if s := b.Stats(); s.ExpertEvicts != 2 || s.ExpertHits != 2 || s.ExpertMisses != 4 {
		t.Fatalf("stats %+v", s)
	}
	// A budget of nothing: every expert goes at EndPass.
	b.SetExpertCacheBytes(-1)
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	if len(l.experts.slots) != 0 || l.experts.bytes != 0 {
		t.Fatalf("%d slots left with no budget", len(l.experts.slots))
	}
}

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"8GiB": 8 << 30, "512M": 512 << 20, "1.5k": 1536, "100": 100, "2 TiB": 2 << 40, "3gb": 3 << 30} {
		if got, err := parseBytes(s); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "G", "-1", "8XB", "lots"} {
		if _, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) succeeded", s)
		}
	}
}

// The host path handles views that share storage (in-place RMSNorm over a
// strided per-head layout, SigmoidMul over a slice of the same buffer), and
// GatherRows/ScatterRows/Combine/Route agree with HostDevice.
func TestLayerHostPathAgainstHostDevice(t *testing.T) {
	bothPaths(t, testLayerHostPathAgainstHostDevice)
}

func testLayerHostPathAgainstHostDevice(t *testing.T, l *Layer) {
	r := rand.New(rand.NewPCG(11, 12))
	var h nn.HostDevice
	q := randVec(r, 3*4*16, 1)
	w := randVec(r, 8, 1)
	hq := append([]float32(nil), q...)
	s := nn.NormSpec{Rows: 12, Width: 8, XStride: 16, YStride: 16, Eps: 1e-6, Kind: nn.NormOffset}
	h.RMSNorm(nn.HostTensor(hq), nn.HostTensor(hq), nn.HostTensor(w), s)
	h.SigmoidMul(nn.HostTensor(hq), nn.HostTensor(hq[8:]), 12, 8, 16, 16)
	dq, err := l.Constant(w)
	if err != nil {
		t.Fatal(err)
	}
	Q := put(t, l, q)
	l.RMSNorm(Q, Q, dq, s)
	l.SigmoidMul(Q, Q.Slice(8, len(q)), 12, 8, 16, 16)
	sameBits(t, "norm+gate", get(t, l, Q), hq)

	x := randVec(r, 5*6, 1)
	rows := []int{4, 0, 1, 2, 4}
	hx := make([]float32, 5*6)
	h.GatherRows(nn.HostTensor(hx), nn.HostTensor(x), rows, 6)
	X := l.Temp(5 * 6)
	l.GatherRows(X, put(t, l, x), rows, 6)
	sameBits(t, "GatherRows", get(t, l, X), hx)
	hs := make([]float32, 5*6)
	h.ScatterRows(nn.HostTensor(hs), nn.HostTensor(x), []int{3, 4, 0, 1, 2}, 6)
	S := l.Temp(5 * 6)
	l.ScatterRows(S, put(t, l, x), []int{3, 4, 0, 1, 2}, 6)
	sameBits(t, "ScatterRows", get(t, l, S), hs)

	logits := randVec(r, 3*10, 3)
	want, got := nn.NewRouting(3, 2), nn.NewRouting(3, 2)
	nn.RouteSoftmaxTopK(want, append([]float32(nil), logits...), 3, 10, true)
	if err := l.Route(got, put(t, l, logits), 3, 10, true); err != nil {
		t.Fatal(err)
	}
	for i := range want.Sel {
		if got.Sel[i] != want.Sel[i] || got.Wts[i] != want.Wts[i] {
			t.Fatalf("Route: %v %v, want %v %v", got.Sel, got.Wts, want.Sel, want.Wts)
		}
	}
	res := randVec(r, 3*2*6, 1)
	hc := make([]float32, 3*6)
	h.Combine(nn.HostTensor(hc), nn.HostTensor(res), want.Wts, 3, 2, 6)
	C := l.Temp(3 * 6)
	l.Combine(C, put(t, l, res), want.Wts, 3, 2, 6)
	sameBits(t, "Combine", get(t, l, C), hc)
	ix, err := l.Indices([]int32{2, 0})
	if err != nil {
		t.Fatal(err)
	}
	G := l.Temp(4)
	l.Gather(G, put(t, l, []float32{1, 2, 3, 4, 5, 6}), ix, 2, 3)
	sameBits(t, "Gather", get(t, l, G), []float32{3, 1, 6, 4})
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
}

// A shape a kernel refuses (more experts than route_topk takes) runs on the
// host path; a NaN router logit is an error, not an expert.
func TestLayerKernelRefusalAndNaN(t *testing.T) {
	l, _ := layerOf(t)
	r := rand.New(rand.NewPCG(13, 14))
	E := routeMaxE + 3
	logits := randVec(r, 2*E, 3)
	want, got := nn.NewRouting(2, 4), nn.NewRouting(2, 4)
	nn.RouteSoftmaxTopK(want, append([]float32(nil), logits...), 2, E, true)
	before := l.b.Stats().HostOps
	if err := l.Route(got, put(t, l, logits), 2, E, true); err != nil {
		t.Fatal(err)
	}
	if l.b.Stats().HostOps != before+1 {
		t.Fatal("the refused Route did not run on the host path")
	}
	for i := range want.Sel {
		if got.Sel[i] != want.Sel[i] || got.Wts[i] != want.Wts[i] {
			t.Fatalf("Route on the host path: %v, want %v", got.Sel, want.Sel)
		}
	}
	logits = randVec(r, 2*10, 1)
	logits[13] = float32(math.NaN())
	if err := l.Route(nn.NewRouting(2, 2), put(t, l, logits), 2, 10, true); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("Route over a NaN: %v", err)
	}
	if err := l.EndPass(); err == nil {
		t.Fatal("EndPass lost the NaN error")
	}
}

// A wait that does not end is an error after its bound.
func TestBoundedWait(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	err := bounded("a test wait", 20*time.Millisecond, func() error { <-block; return nil })
	if err == nil || !strings.Contains(err.Error(), "did not finish within 20ms") {
		t.Fatalf("bounded: %v", err)
	}
	want := errors.New("device error")
	if err := bounded("a test wait", time.Minute, func() error { return want }); err != want {
		t.Fatalf("bounded passed %v, want the wait's own error", err)
	}
}

// The expert budget: SetExpertCacheBytes wins, then QPACK_CUDA_EXPERT_CACHE,
// then half the free device memory at first use.
func TestExpertBudget(t *testing.T) {
	l, f := layerOf(t)
	c := &l.experts
	f.freeMem = 10 << 20
	c.decide(l)
	if c.budget != 5<<20 {
		t.Fatalf("default budget %d, want half of 10 MiB", c.budget)
	}
	t.Setenv(expertCacheEnv, "3MiB")
	l.b.SetExpertCacheBytes(0)
	c.decide(l)
	if c.budget != 3<<20 {
		t.Fatalf("budget %d with %s=3MiB", c.budget, expertCacheEnv)
	}
	l.b.SetExpertCacheBytes(1234)
	c.decide(l)
	if c.budget != 1234 {
		t.Fatalf("budget %d after SetExpertCacheBytes(1234)", c.budget)
	}
	t.Setenv(expertCacheEnv, "lots")
	l.b.SetExpertCacheBytes(0)
	c.decide(l)
	if c.budget != 5<<20 {
		t.Fatalf("budget %d with a bad %s (want the default)", c.budget, expertCacheEnv)
	}
}

// testSrc is the expert source identity of the expert-cache tests.
var testSrc nn.ExpertSource = &nullSource{}

type nullSource struct{ _ byte }

func (*nullSource) Expert(int, int) (*nn.ExpertWeights, error) { panic("nullSource.Expert") }
func (*nullSource) Release(*nn.ExpertWeights)                  {}

// loadBoth loads a tiny model on the CPU and on b, closed when t ends.
func loadBoth(t *testing.T, name string, b *Backend) (ref, m *runtime.Model) {
	t.Helper()
	dir := filepath.Join(tinyDir, name)
	ref, err := runtime.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	m, err = runtime.Load(dir, &runtime.LoadOptions{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return ref, m
}
