package runtime

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// DefaultExpertCacheBytes bounds the simple expert cache when LoadOptions
// leaves it zero.
const DefaultExpertCacheBytes = 1 << 30

// LoadOptions tunes Load.
type LoadOptions struct {
	Backend Backend // nil: CPU
	// ExpertCacheBytes bounds the in-memory LRU of routed experts: 0 means
	// DefaultExpertCacheBytes, a negative value keeps nothing (every
	// request reads from disk).
	ExpertCacheBytes int64
	// Alloc, if set, provides the memory for the dense weights (one arena,
	// freed by Model.Close) and the expert cache's buffers. Nil: the
	// backend's, if it implements Allocator; else the Go heap.
	Alloc Allocator
	// Experts, if set, makes the model's expert source instead of the
	// loader's simple cache (ExpertCacheBytes is then unused): it is called
	// once, after the dense weights are in memory, with where the experts
	// lie on disk and the model so far (its Experts still nil). An error
	// fails the load. The source is the caller's to close.
	Experts func(blobs *ExpertBlobs, m *Model) (ExpertSource, error)
}

// experts gives m its expert source: opt.Experts' if set, else cache.
func (o *LoadOptions) experts(m *Model, cache *ExpertCache) error {
	if o == nil || o.Experts == nil {
		m.Experts = cache
		return nil
	}
	blobs, _ := cache.Blobs()
	src, err := o.Experts(blobs, m)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("LoadOptions.Experts returned no expert source")
	}
	m.Experts = src
	return nil
}

func (o *LoadOptions) cacheBytes() int64 {
	switch {
	case o == nil || o.ExpertCacheBytes == 0:
		return DefaultExpertCacheBytes
	case o.ExpertCacheBytes < 0:
		return 0
	}
	return o.ExpertCacheBytes
}

func (o *LoadOptions) backend() Backend {
	if o == nil {
		return nil
	}
	return o.Backend
}

func (o *LoadOptions) allocator() Allocator {
	if o == nil {
		return nil
	}
	if o.Alloc != nil {
		return o.Alloc
	}
	al, _ := o.Backend.(Allocator)
	return al
}

// closerFunc is a func as an io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// IsContainer reports whether dir looks like a .qpack container (it holds
// manifest.json).
func IsContainer(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "manifest.json"))
	return err == nil && st.Mode().IsRegular()
}

// Load loads the model in dir: a .qpack container if dir holds
// manifest.json, else an MLX checkpoint directory.
func Load(dir string, opt *LoadOptions) (*Model, error) {
	if IsContainer(dir) {
		return LoadContainer(dir, opt)
	}
	return LoadCheckpoint(dir, opt)
}

// closers closes several things, reporting the first error.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fileTensors is a TensorSource over safetensors files: every Read is one
// positional read of the tensor's bytes into a fresh buffer.
type fileTensors struct {
	lookup func(name string) (io.ReaderAt, string, safetensors.Tensor, bool)
}

func (f fileTensors) Info(name string) (string, []int64, bool) {
	_, _, t, ok := f.lookup(name)
	return string(t.DType), t.Shape, ok
}

func (f fileTensors) Read(name string) ([]byte, error) {
	r, file, t, ok := f.lookup(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s missing", name)
	}
	buf := make([]byte, t.Size)
	if _, err := r.ReadAt(buf, t.Offset); err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", file, name, err)
	}
	return buf, nil
}

// ReadInto reads tensor name into dst, which must have its size.
func (f fileTensors) ReadInto(name string, dst []byte) error {
	r, file, t, ok := f.lookup(name)
	if !ok {
		return fmt.Errorf("tensor %s missing", name)
	}
	if t.Size != int64(len(dst)) {
		return fmt.Errorf("%s: tensor %s: %d bytes, want %d for its dtype and shape", file, name, t.Size, len(dst))
	}
	if _, err := r.ReadAt(dst, t.Offset); err != nil {
		return fmt.Errorf("%s: tensor %s: %w", file, name, err)
	}
	return nil
}

// LoadCheckpoint loads an MLX checkpoint directory (config.json and one or
// more safetensors files). Dense tensors are read into memory; each routed
// expert is read on demand with one positional read per section from the
// stacked switch_mlp tensors.
func LoadCheckpoint(dir string, opt *LoadOptions) (m *Model, err error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	files := map[string]*os.File{}
	var cl closers
	defer func() {
		if err != nil {
			cl.Close()
		}
	}()
	for _, s := range ck.Shards {
		f, err := os.Open(s.Path)
		if err != nil {
			return nil, err
		}
		cl = append(cl, f)
		files[s.Name] = f
	}
	lookup := func(name string) (io.ReaderAt, string, safetensors.Tensor, bool) {
		s, t, ok := ck.Lookup(name)
		if !ok {
			return nil, "", t, false
		}
		return files[s.Name], s.Path, t, true
	}
	arch, err := Lookup(cfg.ModelType)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	r, err := newCheckpointExperts(cfg, arch, lookup)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return finishLoad(dir, cfg, r, fileTensors{lookup}, opt, cl, func(c closers) { cl = c })
}

// finishLoad builds the model over its dense tensors and gives it its
// expert source; on error the caller closes cl, which it learns through
// set (the files, then the cache's buffers).
func finishLoad(dir string, cfg *Config, r expertReader, src TensorSource, opt *LoadOptions, cl closers, set func(closers)) (*Model, error) {
	al := opt.allocator()
	cache := newExpertCache(r, cfg.Layers, cfg.Experts, opt.cacheBytes(), nil)
	cache.alloc = al
	cl = append(cl, closerFunc(cache.freeBuffers))
	set(cl)
	m, err := build(cfg, src, nil, opt.backend(), al)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if err := opt.experts(m, cache); err != nil {
		m.Close() // the arena; the caller closes cl
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	m.closer = cl
	return m, nil
}

// checkpointExperts reads experts from the stacked [E, ...] tensors of an
// MLX checkpoint: expert e's slice of a tensor of size S starts at
// offset + e·S/E.
type checkpointExperts struct {
	specs []*expertSpec
	src   [][3][3]stackedTensor
	n     atomic.Int64
}

type stackedTensor struct {
	r    io.ReaderAt
	file string
	name string
	base int64 // absolute offset of expert 0
	size int64 // bytes per expert
}

func newCheckpointExperts(cfg *Config, arch *Arch, lookup func(string) (io.ReaderAt, string, safetensors.Tensor, bool)) (*checkpointExperts, error) {
	ce := &checkpointExperts{specs: make([]*expertSpec, cfg.Layers), src: make([][3][3]stackedTensor, cfg.Layers)}
	E := int64(cfg.Experts)
	for l := 0; l < cfg.Layers; l++ {
		if !cfg.Sparse[l] {
			continue
		}
		module := arch.ExpertModule(cfg, l)
		var sec [3][3]sectionInfo
		var off int64
		for pi, proj := range expertProjs {
			for qi, part := range expertParts {
				name := module + "." + proj + "." + part
				r, file, t, ok := lookup(name)
				if !ok {
					if qi == 0 {
						if _, _, _, per := lookup(perExpertName(module, proj)); per {
							return nil, fmt.Errorf("tensor %s missing: the checkpoint stores experts one by one (transformers layout); convert it with mlx-lm first", name)
						}
						return nil, fmt.Errorf("tensor %s missing", name)
					}
					continue
				}
				if len(t.Shape) < 2 || t.Shape[0] != E {
					return nil, fmt.Errorf("tensor %s: shape %s, want [%d, ...] (stacked experts)", name, ShapeString(t.Shape), E)
				}
				if t.Size%E != 0 {
					return nil, fmt.Errorf("tensor %s: %d bytes do not split into %d experts", name, t.Size, E)
				}
				per := t.Size / E
				sec[pi][qi] = sectionInfo{present: true, dtype: string(t.DType), shape: t.Shape[1:], offset: off, size: per}
				ce.src[l][pi][qi] = stackedTensor{r: r, file: file, name: name, base: t.Offset, size: per}
				off += per
			}
		}
		spec, err := newExpertSpec(cfg, module, sec, off)
		if err != nil {
			return nil, err
		}
		ce.specs[l] = spec
	}
	return ce, nil
}

// perExpertName is where transformers' one-by-one layout would put expert
// 0's proj weight, for module's stacked experts ("….mlp.switch_mlp" →
// "….mlp.experts.0.gate_proj.weight").
func perExpertName(module, proj string) string {
	if i := strings.LastIndexByte(module, '.'); i >= 0 {
		module = module[:i]
	}
	return module + ".experts.0." + proj + ".weight"
}

func (ce *checkpointExperts) spec(l int) *expertSpec { return ce.specs[l] }
func (ce *checkpointExperts) bufSize(l int) int64    { return ce.specs[l].size }
func (ce *checkpointExperts) reads() int64           { return ce.n.Load() }

func (ce *checkpointExperts) read(l, e int, buf []byte) error {
	spec := ce.specs[l]
	for pi := range 3 {
		for qi := range 3 {
			si := spec.sec[pi][qi]
			if !si.present {
				continue
			}
			st := ce.src[l][pi][qi]
			ce.n.Add(1)
			if _, err := st.r.ReadAt(buf[si.offset:si.offset+si.size], st.base+int64(e)*st.size); err != nil {
				return fmt.Errorf("%s: tensor %s: layer %d expert %d: %w", st.file, st.name, l, e, err)
			}
		}
	}
	return nil
}

// LoadContainer loads a .qpack container: dense tensors from its
// model.safetensors, each routed expert with one positional read of its
// stride-sized blob.
func LoadContainer(dir string, opt *LoadOptions) (m *Model, err error) {
	c, err := qpack.Open(dir)
	if err != nil {
		return nil, err
	}
	var cl closers
	cl = append(cl, c)
	defer func() {
		if err != nil {
			cl.Close()
		}
	}()
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	f, err := c.OpenFile("model.safetensors")
	if err != nil {
		return nil, err
	}
	cl = append(cl, f)
	dense := c.Dense
	lookup := func(name string) (io.ReaderAt, string, safetensors.Tensor, bool) {
		t, ok := dense.Tensor(name)
		return f, f.Name(), t, ok
	}
	arch, err := Lookup(cfg.ModelType)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	r, err := newContainerExperts(cfg, arch, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return finishLoad(dir, cfg, r, fileTensors{lookup}, opt, cl, func(c closers) { cl = c })
}

// containerExperts reads whole expert blobs from a .qpack container.
type containerExperts struct {
	c     *qpack.Container
	specs []*expertSpec
	n     atomic.Int64
}

func newContainerExperts(cfg *Config, arch *Arch, c *qpack.Container) (*containerExperts, error) {
	lay := c.Layout
	if lay.LayerCount != cfg.Layers {
		return nil, fmt.Errorf("packed_experts/layout.json: %d layers, config.json has %d", lay.LayerCount, cfg.Layers)
	}
	if lay.ExpertCount != cfg.Experts {
		return nil, fmt.Errorf("packed_experts/layout.json: %d experts per layer, config.json has %d", lay.ExpertCount, cfg.Experts)
	}
	for l, lin := range lay.LinearLayers {
		if l < cfg.Layers && lin == cfg.FullAttention[l] {
			return nil, fmt.Errorf("packed_experts/layout.json: linearLayers[%d] = %v disagrees with config.json", l, lin)
		}
	}
	var sec [3][3]sectionInfo
	for _, s := range lay.Sections {
		pi, qi := -1, -1
		for i, p := range expertProjs {
			for j, q := range expertParts {
				if s.Name == p+"."+q {
					pi, qi = i, j
				}
			}
		}
		if pi < 0 {
			return nil, fmt.Errorf("packed_experts/layout.json: unknown section %q", s.Name)
		}
		sec[pi][qi] = sectionInfo{present: true, dtype: string(s.DType), shape: s.Shape, offset: s.Offset, size: s.Size}
	}
	ce := &containerExperts{c: c, specs: make([]*expertSpec, cfg.Layers)}
	for l := 0; l < cfg.Layers; l++ {
		if !cfg.Sparse[l] {
			continue
		}
		module := arch.ExpertModule(cfg, l)
		spec, err := newExpertSpec(cfg, module, sec, lay.ExpertStride)
		if err != nil {
			return nil, fmt.Errorf("packed_experts/layout.json: %w", err)
		}
		ce.specs[l] = spec
	}
	return ce, nil
}

func (ce *containerExperts) spec(l int) *expertSpec { return ce.specs[l] }
func (ce *containerExperts) bufSize(int) int64      { return ce.c.Layout.ExpertStride }
func (ce *containerExperts) reads() int64           { return ce.n.Load() }

func (ce *containerExperts) read(l, e int, buf []byte) error {
	ce.n.Add(1)
	return ce.c.ReadExpert(l, e, buf)
}
