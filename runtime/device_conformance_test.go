package runtime_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// The conformance suite's op checks pass on the host device and on the
// strict device.
func TestDeviceOpsConformance(t *testing.T) {
	t.Run("host", func(t *testing.T) { devicetest.Ops(t, nn.HostDevice{}, devicetest.DefaultTolerances()) })
	t.Run("strict", func(t *testing.T) { devicetest.Ops(t, devicetest.NewStrict(nil), devicetest.DefaultTolerances()) })
}

// hiddenRun is one forward pass's logits and hidden states.
type hiddenRun struct {
	logits []float32
	hidden [][]float32
}

func runHidden(t *testing.T, m *runtime.Model, st *runtime.State, toks []int) hiddenRun {
	t.Helper()
	r := hiddenRun{hidden: make([][]float32, m.Config.Layers)}
	var err error
	r.logits, err = m.Forward(st, toks, &runtime.ForwardOptions{AllLogits: true,
		LayerHook: func(l int, h []float32) { r.hidden[l] = append([]float32(nil), h...) }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sameBitsF32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %g, host device %g", what, i, got[i], want[i])
		}
	}
}

// Every tiny model through the strict device gives bit-identical logits
// and hidden states to the host device (it runs the same arithmetic, only
// queued and checked), as one chunk and then decoding on, and after a
// snapshot Restore.
func TestStrictDeviceMatchesHost(t *testing.T) {
	dirs, err := devicetest.TinyModels()
	if err != nil {
		t.Fatal(err)
	}
	toks := []int{5, 17, 300, 42, 42, 0, 383, 128, 7, 99, 250, 3}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			host, err := runtime.Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer host.Close()
			sb := devicetest.NewStrictBackend(nil)
			strict, err := runtime.Load(dir, &runtime.LoadOptions{Backend: sb})
			if err != nil {
				t.Fatal(err)
			}
			defer strict.Close()
			if strict.Device() != nn.Device(sb.Dev) {
				t.Fatalf("the model runs on %s, not the strict device", strict.Device().Name())
			}
			V := host.Config.Vocab
			in := make([]int, len(toks))
			for i, v := range toks {
				in[i] = v % V
			}
			hs, ss := host.NewState(), strict.NewState()
			for c, chunk := range [][]int{in[:7], in[7:8], in[8:]} {
				h, s := runHidden(t, host, hs, chunk), runHidden(t, strict, ss, chunk)
				for l := range h.hidden {
					sameBitsF32(t, fmt.Sprintf("chunk %d hidden state of layer %d", c, l), s.hidden[l], h.hidden[l])
				}
				sameBitsF32(t, fmt.Sprintf("chunk %d logits", c), s.logits, h.logits)
			}
			// Snapshots of strict states restore like the host's.
			snap := ss.Snapshot()
			hsnap := hs.Snapshot()
			next := []int{in[2]}
			a := runHidden(t, strict, ss, next)
			if err := ss.Restore(snap); err != nil {
				t.Fatal(err)
			}
			b := runHidden(t, strict, ss, next)
			sameBitsF32(t, "after a snapshot Restore", b.logits, a.logits)
			if err := hs.Restore(hsnap); err != nil {
				t.Fatal(err)
			}
			sameBitsF32(t, "against the host after Restore", b.logits, runHidden(t, host, hs, next).logits)
			t.Logf("%s: %d ops, %d waits, %d passes on the strict device", filepath.Base(dir), sb.Dev.Ops, sb.Dev.Waits, sb.Dev.Passes)
		})
	}
}

// A device error reaches Forward's caller (never a wrong number): the
// strict device fails its waits once told to.
func TestDeviceErrorPropagates(t *testing.T) {
	dirs, err := devicetest.TinyModels()
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("injected device error")
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			sb := devicetest.NewStrictBackend(nil)
			m, err := runtime.Load(dir, &runtime.LoadOptions{Backend: sb})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			st := m.NewState()
			sb.Dev.Fail(boom)
			if out, err := m.Forward(st, []int{1, 2, 3}, nil); !errors.Is(err, boom) {
				t.Fatalf("Forward after a device error: %v, %d logits", err, len(out))
			}
			st.Reset()
			if _, err := m.Forward(st, []int{1, 2, 3}, nil); err != nil {
				t.Fatalf("the error outlived its pass: %v", err)
			}
		})
	}
}

// The Models suite passes on the CPU backend (through the host device) and
// on the strict device.
func TestModelsConformance(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { devicetest.Models(t, runtime.CPU{}) })
	t.Run("strict", func(t *testing.T) { devicetest.Models(t, devicetest.NewStrictBackend(nil)) })
}
