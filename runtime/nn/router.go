package nn

import "fmt"

// ExpertRouter is implemented by a Device that can route a sparse layer and
// run its routed experts without the host: when it holds every expert of
// the layer in its own cache, the router's top-k, the experts' GLUs and
// their weighted sum all stay on the device, so the layer needs no wait
// (Route's), and the experts need no ExpertSource. The result is Route
// followed by MoE.Run's: the same experts in the same top-k order (up to
// the float round-off the Device contract allows).
type ExpertRouter interface {
	// RouteExperts queues s when the device can run it whole (it holds
	// every expert of s.Layer of s.Src, and the shapes suit its kernels)
	// and reports whether it did; false queues nothing. A token whose
	// logits hold a NaN chooses no expert: the device's next EndPass (or
	// wait) returns an error then, never a result.
	RouteExperts(s RoutedSpec) bool
	// MissingExperts lists (ascending) the experts of src's layer of E
	// the device lacks to route it, when it would route the layer once
	// given them and has room for them without dropping any other; nil
	// otherwise (the layer was never seen, too many are missing for the
	// device's taste, its shapes do not suit the device, or its cache is
	// full). MoE.Routed reads them once: a layer
	// whose experts all fit then routes on the device from its next
	// token on, even when some of them have not been chosen yet.
	MissingExperts(src ExpertSource, layer, E int) []int
	// RoutesLayer reports whether RouteExperts would route src's layer of
	// E experts now (every expert held, shapes it takes): a graph then
	// skips what only the host path uses (speculating on the experts to
	// read, a wait).
	RoutesLayer(src ExpertSource, layer, E int) bool
}

// RoutesOnDevice reports whether dev routes src's layer of E experts
// itself (ExpertRouter.RoutesLayer).
func RoutesOnDevice(dev Device, src ExpertSource, layer, E int) bool {
	rt, ok := dev.(ExpertRouter)
	return ok && rt.RoutesLayer(src, layer, E)
}

// RoutedSpec is one sparse layer's routing and routed experts over a chunk
// of T tokens.
type RoutedSpec struct {
	Src    ExpertSource
	Layer  int
	Logits Tensor // router logits [T, E] (contents afterwards undefined)
	X      Tensor // the experts' input [T, H]
	Out    Tensor // Σ_j w_j·expert_j(x) [T, H]
	T      int
	E      int // experts in the layer
	H      int // hidden size (the experts' input and output width)
	K      int // experts per token
	// Norm renormalises each token's K weights to sum one (before Scale).
	Norm bool
	// Scale, when set (E floats), multiplies expert e's weight by
	// Scale[e] after routing (Gemma 4's per-expert scale); ScaleDev is
	// the same vector made resident on the device (Binding.V).
	Scale    []float32
	ScaleDev Tensor
	Act      Activation
	// Shared, when set, is a sigmoid-gated shared expert (Qwen's): Out[t]
	// += sigmoid(SharedGate[t])·Shared(X[t]) after the routed sum, with
	// AddGated's arithmetic; SharedGate holds the gate's logits [T] and the
	// expert uses Act. Its matrices are dense weights (Binding.M).
	Shared     *ExpertMats
	SharedGate Tensor
}

// Routed runs s: on the device when it is an ExpertRouter that can
// (overlap then queues after the routed work), else through Route and Run
// (overlap between the prefetch and the first read, as Run documents).
// d.Experts must be s.Src.
func (d *MoE) Routed(s RoutedSpec, overlap func()) error {
	if rt, ok := d.Device.(ExpertRouter); ok {
		routed := rt.RouteExperts(s)
		if !routed {
			if miss := rt.MissingExperts(s.Src, s.Layer, s.E); len(miss) > 0 {
				if err := d.complete(s.Layer, miss); err != nil {
					return err
				}
				routed = rt.RouteExperts(s)
			}
		}
		if routed {
			if overlap != nil {
				overlap()
			}
			return nil
		}
	}
	r := NewRouting(s.T, s.K)
	if err := d.Device.Route(r, s.Logits, s.T, s.E, s.Norm); err != nil {
		return err
	}
	if s.Scale != nil {
		for i, e := range r.Sel {
			r.Wts[i] *= s.Scale[e]
		}
	}
	var sh Tensor
	if s.Shared != nil {
		// The shared expert computes while the routed ones are read.
		more := overlap
		overlap = func() {
			if more != nil {
				more()
			}
			sh = d.Device.Temp(s.T * s.H)
			glu(d.Device, *s.Shared, s.Act, s.X, sh, s.T)
		}
	}
	if err := d.Run(s.Layer, s.X, s.T, s.H, r, overlap, s.Out); err != nil {
		return err
	}
	if s.Shared != nil {
		d.Device.AddGated(s.Out, sh, s.SharedGate, s.T, s.H)
	}
	return nil
}

// glu queues out = down(act(gate·x)·up·x) over T rows.
func glu(dev Device, m ExpertMats, act Activation, x, out Tensor, T int) {
	I := m.Gate.W.Rows
	g, u := dev.Temp(T*I), dev.Temp(T*I)
	MatMuls(dev, x, T, Product{W: m.Gate, Y: g}, Product{W: m.Up, Y: u}) // one launch on a GPU
	dev.GLU(act, g, g, u, T*I)
	dev.MatMul(m.Down, out, g, T)
}

// complete hands the device the experts it lacks for layer l (read from
// the source, released once the device holds them).
func (d *MoE) complete(l int, miss []int) error {
	for _, e := range miss {
		w, err := d.Experts.Expert(l, e)
		if err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
		_, err = d.Device.Expert(d.Experts, w)
		d.Experts.Release(w)
		if err != nil {
			return fmt.Errorf("layer %d expert %d: %w", l, e, err)
		}
	}
	return nil
}
