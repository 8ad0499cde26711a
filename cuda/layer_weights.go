package cuda

import (
	"fmt"
	"sort"
	"unsafe"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// devMat is a matrix's device copy (nn.Mat.Dev): its weight, scales and
// biases at device addresses, and the gemv kernel for it.
type devMat struct {
	w, s, b devptr
	kernel  string
}

// matBytes is the device bytes a matrix's copy takes: the three slices,
// each starting on a 256-byte boundary.
func matBytes(m mlxq.Matrix) int64 {
	al := func(n int) int64 { return (int64(n) + arenaAlign - 1) &^ (arenaAlign - 1) }
	return al(len(m.Weight)) + al(len(m.Scales)) + al(len(m.Biases))
}

// placeMat lays m's slices out from p (matBytes of them) and queues their
// upload on the compute stream (direct: see upload).
func (l *Layer) placeMat(m mlxq.Matrix, p devptr, direct bool) (*devMat, error) {
	kernel, _ := gemvKernel(m)
	d := &devMat{kernel: kernel}
	for _, part := range []struct {
		dst  *devptr
		data []byte
	}{{&d.w, m.Weight}, {&d.s, m.Scales}, {&d.b, m.Biases}} {
		*part.dst = p
		if err := l.upload(p, part.data, direct); err != nil {
			return nil, err
		}
		p += uint64((len(part.data) + arenaAlign - 1) &^ (arenaAlign - 1))
	}
	return d, nil
}

// regionOf returns the Alloc region holding all of p, or nil.
func (b *Backend) regionOf(p []byte) *region {
	if len(p) == 0 {
		return nil
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	i := sort.Search(len(b.regions), func(i int) bool { return b.regions[i].addr() > a }) - 1
	if i < 0 || uint64(a-b.regions[i].addr())+uint64(len(p)) > uint64(len(b.regions[i].mem)) {
		return nil
	}
	return b.regions[i]
}

// residentFrom records that device memory p holds a copy of weights lying
// in Alloc memory (a model's dense arena), so that it is freed with them.
func (l *Layer) residentFrom(src []byte, p devptr) {
	if r := l.b.regionOf(src); r != nil {
		l.fromRegion[r] = append(l.fromRegion[r], p)
	}
}

// regionFreed is Backend.Free of a region (lock held). When device copies
// of weights in it exist, the model they belong to has been closed: its
// copies are freed and the expert cache is emptied, since its keys
// (layer, expert) name the next model's experts too. (A model whose dense
// weights are not in the backend's Alloc memory cannot be told apart: one
// model per backend then.)
func (l *Layer) regionFreed(r *region) {
	ps, ok := l.fromRegion[r]
	if !ok {
		return
	}
	delete(l.fromRegion, r)
	if err := l.b.dev.syncAll(); err != nil {
		l.fail("freeing a closed model's weights", err)
	}
	l.stageOff = 0
	for _, p := range ps {
		if err := l.devFree(p); err != nil {
			l.fail("freeing a closed model's weights", err)
		}
	}
	l.experts.dropAll(l)
	l.dropTables()
}

// Resident implements nn.Device: the matrix is checked and uploaded once to
// device memory of its own (kept until Close, or until the Alloc memory it
// lies in is freed: the model was closed).
func (l *Layer) Resident(m mlxq.Matrix) (nn.Mat, error) {
	if err := checkMatrix(m); err != nil {
		return nn.Mat{}, fmt.Errorf("cuda: Resident: %w", err)
	}
	l.lock()
	defer l.unlock()
	if l.closed {
		return nn.Mat{}, errClosed
	}
	n := matBytes(m)
	p, err := l.devAlloc(n, fmt.Sprintf("a resident [%d, %d] matrix (%d bits)", m.Rows, m.Cols, m.Bits))
	if err != nil {
		return nn.Mat{}, err
	}
	d, err := l.placeMat(m, p, true)
	if err != nil {
		l.devFree(p)
		return nn.Mat{}, fmt.Errorf("cuda: uploading a resident matrix: %w", err)
	}
	l.residentFrom(m.Weight, p)
	return nn.Mat{W: m, Dev: d}, nil
}

// Constant implements nn.Device: v is copied to device memory of its own.
func (l *Layer) Constant(v []float32) (nn.Tensor, error) {
	if len(v) == 0 {
		return nn.Tensor{}, nil
	}
	l.lock()
	defer l.unlock()
	if l.closed {
		return nn.Tensor{}, errClosed
	}
	p, err := l.devAlloc(4*int64(len(v)), fmt.Sprintf("a constant of %d floats", len(v)))
	if err != nil {
		return nn.Tensor{}, err
	}
	if err := l.upload(p, f32b(v), true); err != nil {
		l.devFree(p)
		return nn.Tensor{}, fmt.Errorf("cuda: uploading a constant: %w", err)
	}
	l.residentFrom(f32b(v), p)
	return nn.Tensor{Buf: &devBuf{p: p, n: len(v)}, N: len(v)}, nil
}

// Indices implements nn.Device: ix is copied to device memory (Index.Dev
// is its devptr) and kept on the host too.
func (l *Layer) Indices(ix []int32) (nn.Index, error) {
	h := nn.Index{Host: ix}
	if len(ix) == 0 {
		return h, nil
	}
	l.lock()
	defer l.unlock()
	if l.closed {
		return nn.Index{}, errClosed
	}
	p, err := l.devAlloc(4*int64(len(ix)), fmt.Sprintf("an index vector of %d", len(ix)))
	if err != nil {
		return nn.Index{}, err
	}
	if err := l.upload(p, i32b(ix), true); err != nil {
		l.devFree(p)
		return nn.Index{}, fmt.Errorf("cuda: uploading indices: %w", err)
	}
	h.Dev = p
	return h, nil
}
