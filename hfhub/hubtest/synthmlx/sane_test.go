package synthmlx

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	_ "github.com/qpack-go/qpack/runtime/models/all" // the architectures the runner knows
	"github.com/qpack-go/qpack/safetensors"
)

// writeDir stores the checkpoint as files, for loaders that read a directory.
func writeDir(t *testing.T, c *Checkpoint) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), c.Config, 0o644); err != nil {
		t.Fatal(err)
	}
	if c.Index != nil {
		if err := os.WriteFile(filepath.Join(dir, safetensors.IndexFile), c.Index, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range c.Shards {
		if err := os.WriteFile(filepath.Join(dir, s.Name), readAll(t, s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestForwardIsSane runs the runtime's forward pass on generated weights:
// the logits must be finite, spread (not constant) and of moderate size,
// and differ between positions.
func TestForwardIsSane(t *testing.T) {
	for _, cfg := range []string{"qwen3_5_moe.config.json", "qwen3_next.config.json"} {
		t.Run(cfg, func(t *testing.T) {
			c, err := New(smallConfig(t, cfg), 11, 8<<20)
			if err != nil {
				t.Fatal(err)
			}
			m, err := runtime.LoadCheckpoint(writeDir(t, c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			tokens := []int{1, 17, 300, 42, 511, 7}
			logits, err := m.Forward(m.NewState(), tokens, &runtime.ForwardOptions{AllLogits: true})
			if err != nil {
				t.Fatal(err)
			}
			V := m.Config.Vocab
			if len(logits) != len(tokens)*V {
				t.Fatalf("%d logits, want %d", len(logits), len(tokens)*V)
			}
			for p := range tokens {
				row := logits[p*V : (p+1)*V]
				var sum, sq float64
				for i, v := range row {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("position %d: logit %d is %v", p, i, v)
					}
					sum += float64(v)
					sq += float64(v) * float64(v)
				}
				mean := sum / float64(V)
				sd := math.Sqrt(sq/float64(V) - mean*mean)
				if sd < 1e-3 || sd > 1e3 {
					t.Fatalf("position %d: logits spread %g (mean %g), want moderate", p, sd, mean)
				}
				if p > 0 && slicesEqual(row, logits[(p-1)*V:p*V]) {
					t.Fatalf("positions %d and %d have the same logits", p-1, p)
				}
			}
		})
	}
}

func slicesEqual(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
