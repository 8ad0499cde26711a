package runtime_test

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
)

// countingSource wraps an expert source, counting the experts handed out.
type countingSource struct {
	runtime.ExpertSource
	n int
}

func (c *countingSource) Expert(l, e int) (*runtime.ExpertWeights, error) {
	c.n++
	return c.ExpertSource.Expert(l, e)
}

// LoadOptions.Experts gives the loader the expert source: it is called
// once the dense weights are in, with the experts' files, and the model
// runs on what it returns, with the same logits as the loader's own cache.
func TestLoadOptionsExperts(t *testing.T) {
	dir := filepath.Join(tinyDir, "qwen3_5_moe-q4g32")
	plain, err := runtime.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var src *countingSource
	calls := 0
	m, err := runtime.Load(dir, &runtime.LoadOptions{Experts: func(b *runtime.ExpertBlobs, m *runtime.Model) (runtime.ExpertSource, error) {
		calls++
		if b == nil || b.Layers() != m.Config.Layers || b.Experts() != m.Config.Experts {
			t.Errorf("blobs %v for a model of %d layers × %d experts", b, m.Config.Layers, m.Config.Experts)
		}
		if m.Experts != nil {
			t.Errorf("the model already has an expert source (%T) when the hook runs", m.Experts)
		}
		// Any source will do: here, a cache over the same files.
		inner, err := runtime.LoadCheckpoint(dir, nil)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { inner.Close() })
		src = &countingSource{ExpertSource: inner.Experts}
		return src, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if calls != 1 || m.Experts != runtime.ExpertSource(src) {
		t.Fatalf("hook called %d times, model source %T", calls, m.Experts)
	}
	a, b := fullLogits(t, plain, testTokens), fullLogits(t, m, testTokens)
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("logit %d: %g with the loader's cache, %g with the hook's source", i, a[i], b[i])
		}
	}
	if src.n == 0 {
		t.Fatal("the hook's source was never asked for an expert")
	}

	boom := errors.New("no expert source today")
	_, err = runtime.Load(dir, &runtime.LoadOptions{Experts: func(*runtime.ExpertBlobs, *runtime.Model) (runtime.ExpertSource, error) { return nil, boom }})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("failing hook: err = %v, want it wrapped with the model's path", err)
	}
}
