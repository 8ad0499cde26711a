package metal

import (
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// TestLayerDeviceBatching: ops are only encoded until Flush, which submits
// them as one command buffer without waiting; Read waits; a Write behind
// queued work is a queued copy (the work before it sees the old values);
// Free while work is queued is deferred to the next wait.
func TestLayerDeviceBatching(t *testing.T) {
	b := kernelTestBackend(t)
	d := b.LayerDevice().(*Device)
	must(t, d.EndPass())
	x, err := d.Alloc(300)
	must(t, err)
	y, err := d.Alloc(300)
	must(t, err)
	ones := make([]float32, 300)
	for i := range ones {
		ones[i] = 1
	}
	d.Write(x, ones) // idle: copied at once
	d.Write(y, ones)
	st0 := d.LayerStats()
	d.Add(x, y, 300)   // x = 2
	d.Scale(x, 3, 300) // x = 6
	twos := make([]float32, 300)
	for i := range twos {
		twos[i] = 2
	}
	d.Write(y, twos) // queued behind the ops: they saw y = 1
	d.Add(x, y, 300) // x = 8
	tmp, err := d.Alloc(10)
	must(t, err)
	d.Free(tmp) // deferred: work is queued
	if len(d.garbage) != 1 {
		t.Errorf("Free with work queued released the memory at once")
	}
	st1 := d.LayerStats()
	if st1.Submits != st0.Submits || st1.Syncs != st0.Syncs || st1.Launches != st0.Launches+4 {
		t.Errorf("before Flush: %+v, then %+v (want 4 launches, nothing submitted)", st0, st1)
	}
	must(t, d.Flush())
	if st := d.LayerStats(); st.Submits != st1.Submits+1 || st.Syncs != st1.Syncs {
		t.Errorf("Flush: %+v, then %+v (want one submit, no wait)", st1, st)
	}
	got := make([]float32, 300)
	must(t, d.Read(got, x))
	for i, v := range got {
		if v != 8 {
			t.Fatalf("x[%d] = %v, want 8", i, v)
		}
	}
	if len(d.garbage) != 0 {
		t.Error("the deferred Free was not released at the wait")
	}
	d.Free(x)
	d.Free(y)
	must(t, d.EndPass())
}

// TestLayerDeviceForeignTensor: a tensor of another device is refused.
func TestLayerDeviceForeignTensor(t *testing.T) {
	d := kernelTestBackend(t).LayerDevice()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "used with the Metal device") {
			t.Errorf("recovered %v", r)
		}
	}()
	x := nn.HostTensor(make([]float32, 4))
	d.Add(x, x, 4)
}

// TestLayerDeviceUnusableKernels: with every layer kernel marked unusable
// (a Mac whose pipeline for it allows fewer than QP_TG threads), every op
// runs on the CPU and the conformance suite still passes.
func TestLayerDeviceUnusableKernels(t *testing.T) {
	b := kernelTestBackend(t)
	un := map[string]bool{}
	for name, sig := range b.lib.kernels {
		if sig.Entry {
			un[name] = true
		}
	}
	d := &Device{b: b, arena: arena{min: b.minArena}, owned: map[*region]bool{}, unusable: un}
	defer d.close()
	devicetest.Ops(t, d, devicetest.DefaultTolerances())
	must(t, d.EndPass())
	if st := d.LayerStats(); st.HostOps == 0 || st.Launches == 0 {
		t.Errorf("stats %+v: want ops on the CPU, and the GEMVs on the device", st)
	}
}
