package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/qpack-go/qpack/runtime/nn"
)

// devBuf is a Layer tensor's storage: n floats of device memory at p. A
// dead buffer (p 0) stands for an allocation that failed; the error is
// pending, so no op touches it.
type devBuf struct {
	p devptr
	n int
}

// Len implements nn.Buffer.
func (b *devBuf) Len() int { return b.n }

// buf returns t's device buffer, panicking for another device's tensor.
func buf(t nn.Tensor) *devBuf {
	b, ok := t.Buf.(*devBuf)
	if !ok {
		panic(fmt.Sprintf("cuda: a %T tensor used with the cuda layer device", t.Buf))
	}
	return b
}

// addr is the device address of t's first float, after checking that t
// has at least n floats inside its buffer (a programming error otherwise).
func addr(t nn.Tensor, n int) devptr {
	b := buf(t)
	if n > t.N || t.Off < 0 || t.Off+t.N > b.n {
		panic(fmt.Sprintf("cuda: %d floats needed of a tensor of %d (at %d of a buffer of %d)", n, t.N, t.Off, b.n))
	}
	return b.p + 4*uint64(t.Off)
}

// devAlloc allocates device memory the Layer owns (freed by Close at the
// latest); what names it in the error.
func (l *Layer) devAlloc(bytes int64, what string) (devptr, error) {
	if bytes <= 0 {
		bytes = 4
	}
	p, err := l.b.dev.memAlloc(int(bytes))
	if err != nil {
		return 0, fmt.Errorf("cuda: allocating %d bytes of device memory for %s: %w", bytes, what, err)
	}
	l.owned[p] = bytes
	return p, nil
}

func (l *Layer) devFree(p devptr) error {
	if _, ok := l.owned[p]; !ok {
		return fmt.Errorf("cuda: freeing device memory %#x the layer does not own", p)
	}
	delete(l.owned, p)
	return l.b.dev.memFree(p)
}

// Alloc implements nn.Device: zeroed device memory of its own.
func (l *Layer) Alloc(n int) (nn.Tensor, error) {
	if n < 0 {
		return nn.Tensor{}, fmt.Errorf("cuda: Alloc(%d)", n)
	}
	ok := l.lock()
	defer l.unlock()
	if l.closed {
		return nn.Tensor{}, errClosed
	}
	_ = ok // an op error pending does not stop an allocation
	p, err := l.devAlloc(4*int64(n), fmt.Sprintf("Alloc(%d floats)", n))
	if err != nil {
		return nn.Tensor{}, err
	}
	if err := l.b.dev.memset(p, 4*n); err != nil {
		l.devFree(p)
		return nn.Tensor{}, fmt.Errorf("cuda: zeroing Alloc(%d): %w", n, err)
	}
	return nn.Tensor{Buf: &devBuf{p: p, n: n}, N: n}, nil
}

// Free implements nn.Device (a tensor from Alloc, as returned).
func (l *Layer) Free(t nn.Tensor) {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	b, ok := t.Buf.(*devBuf)
	if !ok || l.released || b.p == 0 {
		return
	}
	if _, mine := l.owned[b.p]; !mine || t.Off != 0 {
		panic("cuda: Free of a tensor that is not an Alloc result")
	}
	// Queued work may still use it: wait first.
	if err := l.b.dev.sync(); err != nil {
		l.fail("Free", err)
	}
	if err := l.devFree(b.p); err != nil {
		l.fail("Free", err)
	}
	b.p = 0
}

// Temp implements nn.Device: zeroed floats of the pass's arena.
func (l *Layer) Temp(n int) nn.Tensor {
	if n < 0 {
		panic(fmt.Sprintf("cuda: Temp(%d)", n))
	}
	ok := l.lockKeep() // new memory: a pending norm stays pending
	defer l.unlock()
	l.mark("Temp called")
	if !ok {
		return nn.Tensor{Buf: &devBuf{n: n}, N: n}
	}
	b, off, err := l.temp.take(l, 4*int64(n))
	if err != nil {
		l.fail(fmt.Sprintf("Temp(%d)", n), err)
		return nn.Tensor{Buf: &devBuf{n: n}, N: n}
	}
	return nn.Tensor{Buf: b, Off: int(off / 4), N: n}
}

// arena is the Temp memory: chunks of device memory handed out by bumping
// an offset, all released at EndPass. A pass that needs more than the
// chunks hold adds one, as large as all of them (the arena doubles; when
// the device has no room for that, just what the Temp needs); at EndPass
// the chunks are replaced by one of what the pass took, so later passes of
// the same shape reuse one allocation. (It kept one chunk of all the
// chunks' size, up to twice what the pass took, and failed the pass when
// the device had no room for a doubling, though it had for the Temp: a
// GPU whose expert cache holds half its memory, prefilling 4,096 tokens a
// pass, is near that.)
// Temps are zero without a memset each: a chunk is zeroed when it is
// allocated, and at EndPass the part the pass used is zeroed again (one
// memset, queued before the next pass's work).
type arena struct {
	chunks []*devBuf // n counts floats
	cur    int       // chunk being filled
	off    int64     // bytes used of chunks[cur]
	need   int64     // bytes taken this pass (what one chunk needs to hold them)
	grows  int       // chunks added (a test counter)
}

const (
	arenaAlign = 256     // bytes: every Temp starts on this boundary
	arenaMin   = 4 << 20 // bytes of the first chunk
)

// take returns a chunk and a byte offset in it for n bytes.
func (a *arena) take(l *Layer, n int64) (*devBuf, int64, error) {
	n = (max(n, 1) + arenaAlign - 1) &^ (arenaAlign - 1)
	for a.cur < len(a.chunks) {
		c := a.chunks[a.cur]
		if a.off+n <= 4*int64(c.n) {
			off := a.off
			a.off += n
			a.need += n
			return c, off, nil
		}
		a.cur++
		a.off = 0
	}
	var total int64
	for _, c := range a.chunks {
		total += 4 * int64(c.n)
	}
	size := max(int64(arenaMin), total, n)
	p, err := l.devAlloc(size, "the Temp arena")
	if err != nil && size > n {
		size = n // no room to double: what this Temp needs
		p, err = l.devAlloc(size, "the Temp arena")
	}
	if err != nil {
		return nil, 0, err
	}
	if err := l.b.dev.memset(p, int(size)); err != nil {
		l.devFree(p)
		return nil, 0, err
	}
	c := &devBuf{p: p, n: int(size / 4)}
	a.chunks = append(a.chunks, c)
	a.grows++
	a.cur, a.off = len(a.chunks)-1, n
	a.need += n
	return c, 0, nil
}

// reset releases the pass's Temps (the streams are idle).
func (a *arena) reset(l *Layer) error {
	need := a.need
	defer func() { a.cur, a.off, a.need = 0, 0, 0 }()
	if len(a.chunks) == 0 {
		return nil
	}
	if len(a.chunks) == 1 {
		return l.b.dev.memset(a.chunks[0].p, int(a.off))
	}
	var errs []error
	for _, c := range a.chunks {
		errs = append(errs, l.devFree(c.p))
	}
	a.chunks = nil
	// What the pass took, packed (a pass of the same shape fits exactly),
	// rounded up to a MiB.
	total := max(int64(arenaMin), (need+1<<20-1)&^(1<<20-1))
	p, err := l.devAlloc(total, "the Temp arena")
	if err == nil {
		err = l.b.dev.memset(p, int(total))
		a.chunks = []*devBuf{{p: p, n: int(total / 4)}}
	}
	errs = append(errs, err)
	return errors.Join(errs...)
}

func (a *arena) release(l *Layer) error {
	var errs []error
	for _, c := range a.chunks {
		errs = append(errs, l.devFree(c.p))
	}
	a.chunks, a.cur, a.off, a.need = nil, 0, 0, 0
	return errors.Join(errs...)
}

// Staging: pinned host memory that uploads and downloads pass through.
// Space queued for copies stays taken until the next wait of the compute
// stream (wait, EndPass); when it runs out, staging waits itself.

const stageMin = 4 << 20

// staged returns n bytes of staging memory free for a new copy on the
// compute stream.
func (l *Layer) staged(n int) ([]byte, error) {
	h, _, err := l.stagedAt(n)
	return h, err
}

// stagedAt is staged with the bytes' device address: staging is mapped
// into the device's address space, so a kernel queued before the next
// wait may read them in place (mappedUploadsEnv).
func (l *Layer) stagedAt(n int) ([]byte, devptr, error) {
	n = max(n, 1)
	a := (n + stageAlign - 1) &^ (stageAlign - 1)
	if l.stageOff+a > len(l.stage) && l.stageOff > 0 {
		if err := l.b.dev.sync(); err != nil {
			return nil, 0, err
		}
		l.stageOff = 0
	}
	if a > len(l.stage) {
		size := max(a, 2*len(l.stage), stageMin)
		if l.stage != nil {
			if err := l.b.dev.hostFree(l.stage); err != nil {
				return nil, 0, err
			}
			l.stage, l.stageDev = nil, 0
		}
		h, d, err := l.b.dev.hostAlloc(size)
		if err != nil {
			return nil, 0, fmt.Errorf("cuda: allocating %d bytes of pinned staging memory: %w", size, err)
		}
		l.stage, l.stageDev = h, d
	}
	h := l.stage[l.stageOff : l.stageOff+n : l.stageOff+n]
	d := l.stageDev + devptr(l.stageOff)
	l.stageOff += a
	return h, d, nil
}

// stageLimit is the largest single staged copy; longer uploads go in
// pieces.
const stageLimit = 64 << 20

// upload queues a copy of src to dst on the compute stream: directly when
// direct and src lies in pinned memory from Backend.Alloc (the caller keeps
// it unchanged until the stream has run it: weights), else through staging
// (src may be reused at once).
func (l *Layer) upload(dst devptr, src []byte, direct bool) error {
	if len(src) == 0 {
		return nil
	}
	if _, ok := l.b.lookup(src); ok && direct {
		return l.b.dev.htod(dst, src)
	}
	for len(src) > 0 {
		n := min(len(src), stageLimit)
		h, err := l.staged(n)
		if err != nil {
			return err
		}
		copy(h, src[:n])
		if err := l.b.dev.htod(dst, h); err != nil {
			return err
		}
		l.b.stats.StagedBytes += int64(n)
		dst += uint64(n)
		src = src[n:]
	}
	return nil
}

// directReadEnv: 0 sends downloads into pinned memory through staging
// too (the A/B switch of download's direct path).
const directReadEnv = "QPACK_CUDA_DIRECT_READ"

// download copies n bytes at src into dst, waiting for the stream. Into
// pinned memory from Backend.Alloc (a decode loop's logits, the runner's
// pinned buffer) the device copies directly; elsewhere through staging.
func (l *Layer) download(dst []byte, src devptr) error {
	if _, pinned := l.b.lookup(dst); pinned && !l.b.stagedReads {
		if err := l.b.dev.dtoh(dst, src); err != nil {
			return err
		}
		if err := l.b.dev.sync(); err != nil {
			return err
		}
		l.stageOff = 0 // the stream is idle: staging is free again
		return nil
	}
	for len(dst) > 0 {
		n := min(len(dst), stageLimit)
		h, err := l.staged(n)
		if err != nil {
			return err
		}
		if err := l.b.dev.dtoh(h, src); err != nil {
			return err
		}
		if err := l.b.dev.sync(); err != nil {
			return err
		}
		l.stageOff = 0
		copy(dst[:n], h)
		l.b.stats.StagedBytes += int64(n)
		dst = dst[n:]
		src += uint64(n)
	}
	return nil
}

func i32b(x []int32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

func f32b(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

// Write implements nn.Device.
func (l *Layer) Write(dst nn.Tensor, src []float32) {
	ok := l.lock()
	defer l.unlock()
	l.mark("Write called")
	p := addr(dst, len(src))
	if !ok {
		return
	}
	if l.b.mappedUploads && l.kernels && len(src) > 0 && 4*len(src) <= mappedWriteMax {
		l.writeMapped(p, src)
		return
	}
	if err := l.upload(p, f32b(src), false); err != nil {
		l.fail("Write", err)
	}
}

// Mapped uploads turn a pass's small uploads into kernel reads of the
// staging memory in place (it is mapped into the device's address space):
// Write's vectors (a decode step's embedding row) are copied by a
// gather_rows launch from staging, and index lists (a decode step's KV
// row) are read by their kernels from staging, instead of a copy each on
// the compute stream (a CUDA graph's memcpy node). On by default since the
// twentieth session (H100, 35b dims, 5 interleaved rounds: 1,613 against
// 1,590 tok/s resident, layer 0's queue 26.2 against 35.0 µs);
// mappedUploadsEnv set to 0 turns them off.
const mappedUploadsEnv = "QPACK_CUDA_MAPPED_UPLOADS"

// mappedWriteMax is the largest Write read in place by a kernel, and
// mappedRowsMax the longest index list (a decode step's KV row is one).
const (
	mappedWriteMax = 64 << 10
	mappedRowsMax  = 16
)

// writeMapped queues src into p as a kernel's copy from staging (lock
// held; mappedUploadsEnv).
func (l *Layer) writeMapped(p devptr, src []float32) {
	h, d, err := l.stagedAt(4 * len(src))
	if err != nil {
		l.fail("Write", err)
		return
	}
	copy(h, f32b(src))
	ix, err := l.indexList([]int{0})
	if err != nil {
		l.fail("Write", err)
		return
	}
	l.b.stats.StagedBytes += int64(4 * len(src))
	if l.kernel("Write", l.b.kGatherRows(p, d, ix, 1, 1, len(src))) {
		return
	}
	// The kernel refused the shape (l.kernel logged it): the copy.
	if err := l.upload(p, f32b(src), false); err != nil {
		l.fail("Write", err)
	}
}

// Read implements nn.Device.
func (l *Layer) Read(dst []float32, src nn.Tensor) error {
	ok := l.lock()
	defer l.unlock()
	n := min(len(dst), src.N)
	p := addr(src, n)
	if !ok {
		return l.err
	}
	if err := l.download(f32b(dst[:n]), p); err != nil {
		l.fail("Read", err)
	}
	return l.err
}

// Copy implements nn.Device.
func (l *Layer) Copy(dst, src nn.Tensor) {
	ok := l.lock()
	defer l.unlock()
	d, s := addr(dst, src.N), addr(src, src.N)
	if !ok || src.N == 0 {
		return
	}
	if err := l.b.dev.dtod(d, s, 4*src.N); err != nil {
		l.fail("Copy", err)
	}
}
