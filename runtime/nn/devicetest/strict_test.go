package devicetest

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// mustPanic fails t unless f panics with a message containing want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one about %q", want)
		}
		if msg, _ := r.(string); !strings.Contains(msg, want) {
			t.Fatalf("panic %v, want one about %q", r, want)
		}
	}()
	f()
}

func floats(t nn.Tensor) []float32 {
	b := t.Buf.(*sbuf)
	return b.f[t.Off : t.Off+t.N]
}

// Strict catches the graph-side contract violations it documents.
func TestStrictCatches(t *testing.T) {
	d := NewStrict(nil)
	t.Run("host access", func(t *testing.T) {
		x := d.Temp(4)
		mustPanic(t, "used with the host device", func() { nn.F32(x) })
	})
	t.Run("mixed devices", func(t *testing.T) {
		x := d.Temp(4)
		mustPanic(t, "another device's", func() { d.Add(x, nn.HostTensor(make([]float32, 4)), 4) })
		mustPanic(t, "another Strict", func() { d.Add(x, NewStrict(nil).Temp(4), 4) })
		kv, _ := nn.HostDevice{}.NewKV(4, 4, 0)
		mustPanic(t, "not made by this device", func() { d.Attention(kv, x, x, x, x, 1, nn.AttnDims{Heads: 1, KVHeads: 1, HeadDim: 4, QStride: 4}) })
		m := randDense(rng(1), 2, 4, mlxq.F32).m
		mustPanic(t, "not made by this device", func() { d.MatMul(nn.Mat{W: m}, x, x, 1) })
	})
	t.Run("queued until a wait", func(t *testing.T) {
		x := d.Temp(3)
		d.Write(x, []float32{1, 2, 3})
		d.Scale(x, 2, 3)
		if got := floats(x); got[0] != 0 {
			t.Fatalf("ops ran before a wait: %v", got)
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := floats(x); got[2] != 6 {
			t.Fatalf("after Flush: %v", got)
		}
		endPass(t, d)
	})
	t.Run("Write copies", func(t *testing.T) {
		x := d.Temp(2)
		src := []float32{4, 5}
		d.Write(x, src)
		src[0] = 9
		exact(t, "Write", get(t, d, x), []float32{4, 5})
		endPass(t, d)
	})
	t.Run("Temp after EndPass", func(t *testing.T) {
		x := d.Temp(3)
		endPass(t, d)
		if v := floats(x)[1]; !math.IsNaN(float64(v)) {
			t.Fatalf("a released Temp holds %g, want NaN", v)
		}
		mustPanic(t, "after the EndPass", func() { d.Scale(x, 2, 3) })
	})
	t.Run("Free", func(t *testing.T) {
		a, _ := d.Alloc(4)
		d.Free(a)
		mustPanic(t, "after Free", func() { d.Scale(a, 2, 4) })
		mustPanic(t, "after Free", func() { d.Free(a) })
		mustPanic(t, "whole Alloc", func() { d.Free(d.Temp(2)) })
	})
	t.Run("host slices held", func(t *testing.T) {
		x, y := d.Temp(8), d.Temp(8)
		rows := []int{1, 0}
		d.GatherRows(y, x, rows, 4)
		rows[0] = 0
		mustPanic(t, "changed between the call", func() { d.Flush() })
		wts := []float32{0.5, 0.5}
		d.Combine(d.Temp(4), d.Temp(8), wts, 1, 2, 4)
		wts[1] = 1
		mustPanic(t, "changed between the call", func() { d.EndPass() })
		d.queue, d.temps = nil, nil
	})
	t.Run("Constant unchanged", func(t *testing.T) {
		v := []float32{1, 2}
		if _, err := d.Constant(v); err != nil {
			t.Fatal(err)
		}
		v[0] = 3
		mustPanic(t, "Constant changed", func() { d.EndPass() })
		d.consts = nil
	})
	t.Run("bounds", func(t *testing.T) {
		m, _ := d.Resident(randDense(rng(2), 3, 4, mlxq.F32).m)
		mustPanic(t, "where 6 are needed", func() { d.MatMul(m, d.Temp(5), d.Temp(8), 2) })
		mustPanic(t, "where 8 are needed", func() { d.MatMul(m, d.Temp(6), d.Temp(7), 2) })
		mustPanic(t, "where 14 are needed", func() {
			d.RMSNorm(d.Temp(14), d.Temp(13), d.Temp(4), nn.NormSpec{Rows: 2, Width: 4, XStride: 10, YStride: 10})
		})
		mustPanic(t, "stride", func() { d.RoPE(d.Temp(16), nn.NewRoPE(8, 1e4), nn.RoPESpec{Rows: 2, PerPos: 1, Stride: 6}) })
		kv, _ := d.NewKV(8, 8, 0)
		mustPanic(t, "where 16 are needed", func() {
			d.Attention(kv, d.Temp(16), d.Temp(15), d.Temp(16), d.Temp(16), 2, nn.AttnDims{Heads: 2, KVHeads: 1, HeadDim: 4, QStride: 4})
		})
		mustPanic(t, "where 12 are needed", func() { d.GatherRows(d.Temp(8), d.Temp(8), []int{2, 0}, 4) })
		mustPanic(t, "slots", func() { d.Route(nn.NewRouting(1, 2), d.Temp(8), 2, 4, true) })
		d.queue = nil
		endPass(t, d)
	})
	t.Run("experts", func(t *testing.T) {
		r := rng(3)
		e := newExpert(0, 1, randQuant(r, 64, 32, 4, 32, mlxq.BF16), randQuant(r, 64, 32, 4, 32, mlxq.BF16), randQuant(r, 32, 64, 4, 32, mlxq.BF16))
		mats, _ := d.Expert(nil, e.w)
		clear(e.w.Buf) // released and reused before the work was even queued
		x := randF32(r, 32, 1)
		y := queueExpert(d, mats, put(d, x), 1)
		want, mag := e.ref(x, 1)
		within(t, "expert from copied bytes", get(t, d, y), want, mag, 2e-4)
		endPass(t, d)
		mustPanic(t, "after the EndPass that ended it", func() { d.MatMul(mats.Gate, d.Temp(64), d.Temp(32), 1) })
	})
	t.Run("Route poisons the logits", func(t *testing.T) {
		L := put(d, []float32{1, 2, 3, 4})
		if err := d.Route(nn.NewRouting(1, 2), L, 1, 4, true); err != nil {
			t.Fatal(err)
		}
		if v := floats(L)[0]; !math.IsNaN(float64(v)) {
			t.Fatalf("logits after Route: %g, want NaN", v)
		}
		endPass(t, d)
	})
	t.Run("states between passes", func(t *testing.T) {
		kv, _ := d.NewKV(4, 4, 0)
		d.Attention(kv, d.Temp(4), d.Temp(4), d.Temp(4), d.Temp(4), 1, nn.AttnDims{Heads: 1, KVHeads: 1, HeadDim: 4, QStride: 4})
		if kv.Len() != 1 {
			t.Fatalf("Len %d with the chunk queued, want 1", kv.Len())
		}
		mustPanic(t, "queued", func() { kv.Clone() })
		ts, _ := d.NewTensors(3)
		mustPanic(t, "queued", func() { ts.Reset() })
		endPass(t, d)
		kv.Clone()
	})
	t.Run("sticky error", func(t *testing.T) {
		boom := errors.New("boom")
		d.Fail(boom)
		x := d.Temp(2)
		if err := d.Read(make([]float32, 2), x); !errors.Is(err, boom) {
			t.Fatalf("Read: %v", err)
		}
		if err := d.Flush(); !errors.Is(err, boom) {
			t.Fatalf("Flush: %v", err)
		}
		if err := d.EndPass(); !errors.Is(err, boom) {
			t.Fatalf("EndPass: %v", err)
		}
		endPass(t, d) // cleared
	})
}
