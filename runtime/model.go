package runtime

import (
	"fmt"
	"github.com/qpack-go/qpack/runtime/nn"
	"io"
)

// DenseTensor is one tensor held in memory (little-endian bytes of DType,
// spelled as in safetensors: "F32", "BF16", "U32", ...).
type DenseTensor struct {
	DType string
	Shape []int64
	Data  []byte
}

// TensorSource supplies the dense (non-expert) tensors of a model by name.
// Read may be called once per tensor; the returned bytes must stay valid and
// unchanged for the life of the Model.
type TensorSource interface {
	Info(name string) (dtype string, shape []int64, ok bool)
	Read(name string) ([]byte, error)
}

// MapTensors is a TensorSource over tensors already in memory.
type MapTensors map[string]DenseTensor

// Info implements TensorSource.
func (m MapTensors) Info(name string) (string, []int64, bool) {
	t, ok := m[name]
	return t.DType, t.Shape, ok
}

// Read implements TensorSource.
func (m MapTensors) Read(name string) ([]byte, error) {
	t, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("tensor %s not found", name)
	}
	return t.Data, nil
}

// Model is a loaded text model of a registered architecture.
type Model struct {
	Config  *Config
	Backend Backend
	// Experts supplies the routed experts. The loader sets it (to
	// LoadOptions.Experts' source when that is given); it must not be
	// changed while a forward pass runs.
	Experts ExpertSource

	arch  *Arch
	graph Graph

	closer io.Closer   // files behind the tensors and experts, if any
	arena  *denseArena // the dense weights' memory from an Allocator, if any
}

// Device is the device the model's layers run on: the Backend's own when
// it has one (nn.Layered: a GPU backend with the whole-layer seam), else
// the host device over the Backend (CPU when nil).
func (m *Model) Device() nn.Device {
	if l, ok := m.Backend.(nn.Layered); ok {
		if d := l.LayerDevice(); d != nil {
			return d
		}
	}
	return nn.HostDevice{Backend: m.Backend}
}

// Arch is the architecture the model runs.
func (m *Model) Arch() *Arch { return m.arch }

// NewModel assembles a Model from a config, its dense tensors (MLX names,
// e.g. "model.layers.0.linear_attn.in_proj_qkvz.weight") and its routed
// experts, with the architecture registered for cfg.ModelType. backend nil
// means CPU. Every tensor is checked against the config. If the backend
// implements Allocator, the dense weights are copied into memory from it,
// which Close gives back.
func NewModel(cfg *Config, tensors TensorSource, experts ExpertSource, backend Backend) (*Model, error) {
	al, _ := backend.(Allocator)
	return build(cfg, tensors, experts, backend, al)
}

// build assembles a Model from a config, its dense tensors and its experts.
// With an allocator, the dense tensors the model keeps are read into one
// allocation from it: a sizing pass checks every tensor and adds up the
// arena's size, then the tensors are read into their places.
func build(cfg *Config, src TensorSource, experts ExpertSource, backend Backend, al Allocator) (m *Model, err error) {
	arch, err := Lookup(cfg.ModelType)
	if err != nil {
		return nil, err
	}
	if backend == nil {
		backend = CPU{}
	}
	m = &Model{Config: cfg, Backend: backend, Experts: experts, arch: arch}
	if al == nil {
		if m.graph, err = arch.Build(&Weights{cfg: cfg, src: src}); err != nil {
			return nil, err
		}
		return m, nil
	}
	plan := &Weights{cfg: cfg, src: src, arena: &denseArena{}}
	if _, err := arch.Build(plan); err != nil {
		return nil, err
	}
	arena, err := newDenseArena(al, plan.arena.off)
	if err != nil {
		return nil, err
	}
	if m.graph, err = arch.Build(&Weights{cfg: cfg, src: src, arena: arena}); err != nil {
		arena.free()
		return nil, err
	}
	m.arena = arena
	return m, nil
}

// Close releases the files behind the model, if any, and the memory its
// dense weights took from an Allocator. The model must not be used after.
func (m *Model) Close() error {
	var err error
	if m.closer != nil {
		err = m.closer.Close()
		m.closer = nil
	}
	if e := m.arena.free(); err == nil {
		err = e
	}
	m.arena = nil
	return err
}
