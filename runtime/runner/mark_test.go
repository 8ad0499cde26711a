package runner

import (
	"context"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime"
)

// markingCPU is the CPU backend with the runtime.Marker hook recording
// the points it is told.
type markingCPU struct {
	runtime.CPU
	points []string
}

func (m *markingCPU) Mark(point string) { m.points = append(m.points, point) }

// A backend that is a runtime.Marker hears, at each decode step, the
// runner's draw (its start and its end), its call of Forward and the
// graph's Forward (called and returned), in that order (the CUDA
// timeline's points outside the backend).
func TestMarkerPoints(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	be := &markingCPU{}
	r := open(t, f.raw, Options{Backend: be})
	r.EOS = nil
	res, err := r.NewSession().Generate(context.Background(), prompt, GenOptions{MaxNew: 4})
	if err != nil {
		t.Fatal(err)
	}
	draw := []string{"the runner draws", "the runner's draw returns"}
	pass := []string{"the graph's Forward called", "the graph's Forward returns"}
	want := slices.Clone(pass) // the prompt's pass
	for range res.DecodeTokens {
		want = append(append(append(want, draw...), "the runner calls Forward"), pass...)
	}
	want = append(want, draw...) // the last token's draw
	if !slices.Equal(be.points, want) {
		t.Fatalf("points %q,\nwant %q", be.points, want)
	}
}
