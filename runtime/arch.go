package runtime

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/qpack-go/qpack/runtime/nn"
)

// LayerState is the decode state one layer keeps (see nn.LayerState).
type LayerState = nn.LayerState

// Graph is one loaded architecture's forward pass: the weights its Build
// read, and the computation over them.
type Graph interface {
	// NewLayerStates returns a fresh decode state per layer (nil for a
	// layer that keeps none) on dev, the device Forward will run on.
	NewLayerStates(dev nn.Device) ([]LayerState, error)
	// Forward runs a chunk of tokens (already checked to be in the
	// vocabulary) at positions pos.., continuing from the layer states
	// st, and returns logits as Model.Forward documents.
	Forward(env Env, st []LayerState, pos int, tokens []int, opt *ForwardOptions) ([]float32, error)
}

// Env is what a forward pass runs with: the device that runs its layers
// (Model.Device), the backend behind it, and the source of the routed
// experts.
type Env struct {
	Device  nn.Device
	Backend Backend
	Experts ExpertSource
}

// Arch is one architecture of the runner, registered by its package (under
// runtime/models) at init. Its Name is the architecture name package
// modelconfig resolves config.json's model_type and text_config.model_type
// to (Config.ModelType); the config's parser is registered there.
type Arch struct {
	Name string
	// Build reads the dense weights (see Weights for its two passes).
	Build func(w *Weights) (Graph, error)
	// ExpertModule is the module path of layer l's stacked routed experts
	// in a checkpoint, without the projection ("model.layers.3.mlp.switch_mlp"):
	// its gate_proj, up_proj and down_proj (.weight, .scales, .biases) are
	// the expert tensors, and their quantization is looked up by it.
	ExpertModule func(cfg *Config, layer int) string
}

var archs = struct {
	sync.RWMutex
	byName map[string]*Arch
}{byName: map[string]*Arch{}}

// Register adds an architecture. It panics when the name is taken or the
// Arch is incomplete (programming errors, found at init).
func Register(a Arch) {
	if a.Name == "" || a.Build == nil || a.ExpertModule == nil {
		panic("runtime: Register needs a Name, Build and ExpertModule")
	}
	archs.Lock()
	defer archs.Unlock()
	if _, dup := archs.byName[a.Name]; dup {
		panic(fmt.Sprintf("runtime: architecture %q registered twice", a.Name))
	}
	archs.byName[a.Name] = &a
}

// Registered lists the registered architectures, sorted.
func Registered() []string {
	archs.RLock()
	defer archs.RUnlock()
	out := make([]string, 0, len(archs.byName))
	for n := range archs.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// UnsupportedArchError is returned for a config whose architecture has no
// registered forward pass.
type UnsupportedArchError struct {
	ModelType  string
	Registered []string
}

func (e *UnsupportedArchError) Error() string {
	if len(e.Registered) == 0 {
		return fmt.Sprintf("model_type %q: no architecture is registered with the runner (import runtime/models/all)", e.ModelType)
	}
	return fmt.Sprintf("model_type %q: the runner has no forward pass for it (it runs %s)", e.ModelType, strings.Join(e.Registered, ", "))
}

// Lookup returns the architecture registered under name.
func Lookup(name string) (*Arch, error) {
	archs.RLock()
	a := archs.byName[name]
	archs.RUnlock()
	if a == nil {
		return nil, &UnsupportedArchError{ModelType: name, Registered: Registered()}
	}
	return a, nil
}
