package runtime

import (
	"fmt"
	"os"

	"github.com/qpack-go/qpack/qpack"
)

// ExpertExtent is one contiguous byte range of an expert's buffer as it lies
// on disk: Size bytes at Offset in the file at Path go to buf[BufOffset:].
type ExpertExtent struct {
	Path      string
	Offset    int64
	Size      int64
	BufOffset int64
}

// ExpertBlobs describes where every routed expert of a file-backed model
// lies on disk and how to view an expert's bytes as its matrices, for
// callers that read experts themselves (the runner's expert cache). A .qpack
// container gives one extent per expert (its whole stride-sized blob); an
// MLX checkpoint gives one extent per section (gate, up, down × weight,
// scales, biases) of the stacked tensors.
type ExpertBlobs struct {
	layers, experts int
	r               expertReader
	container       *qpack.Container // nil for a checkpoint
}

// Blobs returns the on-disk description of the experts behind the cache, or
// false if the cache is not backed by files this package opened.
func (c *ExpertCache) Blobs() (*ExpertBlobs, bool) {
	switch r := c.r.(type) {
	case *containerExperts:
		return &ExpertBlobs{layers: c.layers, experts: c.experts, r: r, container: r.c}, true
	case *checkpointExperts:
		return &ExpertBlobs{layers: c.layers, experts: c.experts, r: r}, true
	}
	return nil, false
}

// Layers is the number of decoder layers.
func (b *ExpertBlobs) Layers() int { return b.layers }

// Experts is the number of routed experts per sparse layer.
func (b *ExpertBlobs) Experts() int { return b.experts }

// Container returns the .qpack container the experts come from, or nil for
// an MLX checkpoint directory.
func (b *ExpertBlobs) Container() *qpack.Container { return b.container }

// BufSize returns the size of the buffer one expert of layer l is read into
// (for a container, the stride, padding included), or 0 if layer l has no
// routed experts.
func (b *ExpertBlobs) BufSize(l int) int64 {
	if l < 0 || l >= b.layers || b.r.spec(l) == nil {
		return 0
	}
	return b.r.bufSize(l)
}

func (b *ExpertBlobs) check(l, e int) error {
	if l < 0 || l >= b.layers {
		return fmt.Errorf("expert %d of layer %d: layer out of range [0, %d)", e, l, b.layers)
	}
	if e < 0 || e >= b.experts {
		return fmt.Errorf("expert %d of layer %d: expert out of range [0, %d)", e, l, b.experts)
	}
	if b.r.spec(l) == nil {
		return fmt.Errorf("expert %d of layer %d: layer has no routed experts", e, l)
	}
	return nil
}

// Extents appends to dst the byte ranges that make up expert e of layer l,
// in buffer order, and returns the extended slice.
func (b *ExpertBlobs) Extents(l, e int, dst []ExpertExtent) ([]ExpertExtent, error) {
	if err := b.check(l, e); err != nil {
		return dst, err
	}
	switch r := b.r.(type) {
	case *containerExperts:
		off, err := r.c.ExpertOffset(l, e)
		if err != nil {
			return dst, err
		}
		return append(dst, ExpertExtent{Path: r.c.LayerPath(l), Offset: off, Size: r.c.Layout.ExpertStride}), nil
	case *checkpointExperts:
		spec := r.specs[l]
		for pi := range 3 {
			for qi := range 3 {
				si := spec.sec[pi][qi]
				if !si.present {
					continue
				}
				st := r.src[l][pi][qi]
				f, ok := st.r.(*os.File)
				if !ok {
					return dst, fmt.Errorf("%s: tensor %s: not backed by an OS file", st.file, st.name)
				}
				dst = append(dst, ExpertExtent{Path: f.Name(), Offset: st.base + int64(e)*st.size, Size: si.size, BufOffset: si.offset})
			}
		}
		return dst, nil
	}
	return dst, fmt.Errorf("expert %d of layer %d: unknown expert reader", e, l)
}

// View makes w's matrices view buf, which holds the bytes of expert e of
// layer l as Extents describes them (len(buf) ≥ BufSize(l)). It checks the
// buffer's size, not its contents.
func (b *ExpertBlobs) View(l, e int, buf []byte, w *ExpertWeights) error {
	if err := b.check(l, e); err != nil {
		return err
	}
	spec := b.r.spec(l)
	if int64(len(buf)) < spec.size {
		return fmt.Errorf("expert %d of layer %d: buffer of %d bytes, want %d", e, l, len(buf), spec.size)
	}
	*w = ExpertWeights{Layer: l, Expert: e, Buf: buf}
	return spec.view(buf, w)
}
