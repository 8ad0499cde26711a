package qpack

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/zeebo/blake3"
)

// Digests are computed from blocks of hashBlock bytes; hashBuffers blocks
// per digest are in flight, so that the next block is read while the
// previous ones are hashed (memory: hashBuffers x hashBlock per file).
const (
	hashBlock   = 1 << 20
	hashBuffers = 4
)

// errStopped is returned by a digest whose stop function said to stop.
var errStopped = errors.New("stopped")

// DigestFile returns the lowercase hex BLAKE3-256 digest of everything r
// yields (what b3sum prints). Reading overlaps hashing. progress, if not
// nil, is called with the number of bytes hashed since its previous call
// (from one goroutine at a time).
func DigestFile(r io.Reader, progress func(n int64)) (string, error) {
	d, _, err := fileDigest(newReaderSource(r, -1), progress, nil)
	return d, err
}

// DigestLayer reads a layer file of expertCount blobs of stride bytes from r
// once and returns the digest of the whole file and one digest per expert
// blob (each over its full stride, padding included). It fails if r ends
// before expertCount x stride bytes or yields more. The two kinds of digest
// are computed concurrently from the same blocks (two goroutines), while the
// next blocks are read. progress is as for DigestFile.
func DigestLayer(r io.Reader, expertCount int, stride int64, progress func(n int64)) (file string, experts []string, err error) {
	return digestLayer(r, expertCount, stride, progress, nil)
}

func layerTotal(expertCount int, stride int64) (int64, error) {
	if expertCount <= 0 || stride <= 0 || stride > (1<<62)/int64(expertCount) {
		return 0, fmt.Errorf("bad layer shape: %d experts x %d bytes", expertCount, stride)
	}
	return int64(expertCount) * stride, nil
}

// digestOpenFile digests f, which must hold exactly size bytes (a layer
// file: expertCount x stride bytes, also digested per expert when
// expertCount > 0). Where it can it hashes the file through read-only
// mappings (no copy into a buffer); else it reads it.
func digestOpenFile(f *os.File, size int64, expertCount int, stride int64, progress func(int64), stop func() bool) (string, []string, error) {
	if expertCount > 0 {
		total, err := layerTotal(expertCount, stride)
		if err != nil {
			return "", nil, err
		}
		if total != size {
			return "", nil, fmt.Errorf("internal error: layer file of %d bytes for %d experts x %d", size, expertCount, stride)
		}
	}
	st, err := f.Stat()
	if err != nil {
		return "", nil, err
	}
	src, ok, err := mapSourceFor(f, st.Size())
	if err != nil {
		return "", nil, err
	}
	if !ok {
		// Read it, checking the length as the reader digests do.
		r := io.LimitReader(f, size+1)
		if expertCount > 0 {
			file, experts, err := digestLayer(r, expertCount, stride, progress, stop)
			return file, experts, err
		}
		d, n, err := fileDigest(newReaderSource(r, -1), progress, stop)
		if err == nil && n != size {
			err = fmt.Errorf("%d bytes, want %d", n, size)
		}
		return d, nil, err
	}
	defer src.close()
	if st.Size() != size {
		if expertCount > 0 {
			if st.Size() > size {
				return "", nil, fmt.Errorf("file is longer than %d experts x %d bytes", expertCount, stride)
			}
			e := st.Size() / stride
			return "", nil, fmt.Errorf("expert %d: file ends inside expert %d", e, e)
		}
		return "", nil, fmt.Errorf("%d bytes, want %d", st.Size(), size)
	}
	if expertCount > 0 {
		file, experts, _, err := layerDigests(src, expertCount, stride, progress, stop)
		return file, experts, err
	}
	d, _, err := fileDigest(src, progress, stop)
	return d, nil, err
}

// digestLayer is DigestLayer with a stop function.
func digestLayer(r io.Reader, expertCount int, stride int64, progress func(int64), stop func() bool) (string, []string, error) {
	total, err := layerTotal(expertCount, stride)
	if err != nil {
		return "", nil, err
	}
	file, experts, n, err := layerDigests(newReaderSource(r, total), expertCount, stride, progress, stop)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("file ends inside expert %d", n/stride)
		}
		return "", nil, fmt.Errorf("expert %d: %w", min(n/stride, int64(expertCount)-1), err)
	}
	var one [1]byte
	if k, _ := io.ReadFull(r, one[:]); k != 0 {
		return "", nil, fmt.Errorf("file is longer than %d experts x %d bytes", expertCount, stride)
	}
	return file, experts, nil
}

// fileDigest hashes everything src yields.
func fileDigest(src blockSource, progress func(int64), stop func() bool) (string, int64, error) {
	h := blake3.New()
	n, err := pipeline(src, []func([]byte){func(b []byte) {
		h.Write(b)
		if progress != nil {
			progress(int64(len(b)))
		}
	}}, stop)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// layerDigests hashes the expertCount x stride bytes src yields as a
// whole and per stride, in two goroutines.
func layerDigests(src blockSource, expertCount int, stride int64, progress func(int64), stop func() bool) (string, []string, int64, error) {
	fh := blake3.New()
	eh := blake3.New()
	experts := make([]string, 0, expertCount)
	var pos int64 // within the current expert
	fileSink := func(b []byte) {
		fh.Write(b)
		if progress != nil {
			progress(int64(len(b)))
		}
	}
	expertSink := func(b []byte) {
		for len(b) > 0 {
			n := min(int64(len(b)), stride-pos)
			eh.Write(b[:n])
			b = b[n:]
			if pos += n; pos == stride {
				experts = append(experts, hex.EncodeToString(eh.Sum(nil)))
				eh.Reset()
				pos = 0
			}
		}
	}
	n, err := pipeline(src, []func([]byte){fileSink, expertSink}, stop)
	if err != nil {
		return "", nil, n, err
	}
	if len(experts) != expertCount || pos != 0 {
		return "", nil, n, fmt.Errorf("internal error: %d expert digests for %d experts", len(experts), expertCount)
	}
	return hex.EncodeToString(fh.Sum(nil)), experts, n, nil
}

// blockSource yields the blocks a pipeline hashes, in order.
type blockSource interface {
	// next returns the next block, or nil at the end; release must be
	// called once every sink is done with the block.
	next() (b []byte, release func(), err error)
	// close releases what the source holds, once every block is released.
	close()
}

// readerSource reads an io.Reader into hashBuffers reused buffers. With
// limit >= 0 it yields exactly limit bytes (io.ErrUnexpectedEOF or io.EOF
// if the reader ends first); with limit < 0 everything up to EOF.
type readerSource struct {
	r       io.Reader
	limit   int64
	n       int64
	free    chan []byte
	done    bool
	pending error // a read error to return after the bytes read with it
}

func newReaderSource(r io.Reader, limit int64) *readerSource {
	size := int64(hashBlock)
	if limit >= 0 {
		size = max(1, min(size, limit))
	}
	s := &readerSource{r: r, limit: limit, free: make(chan []byte, hashBuffers)}
	for i := 0; i < hashBuffers; i++ {
		s.free <- make([]byte, size)
	}
	return s
}

func (s *readerSource) next() ([]byte, func(), error) {
	if s.pending != nil {
		err := s.pending
		s.pending, s.done = nil, true
		return nil, nil, err
	}
	if s.done || (s.limit >= 0 && s.n >= s.limit) {
		return nil, nil, nil
	}
	b := <-s.free
	if s.limit >= 0 {
		b = b[:min(int64(len(b)), s.limit-s.n)]
	}
	k, err := io.ReadFull(s.r, b)
	if s.limit < 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
		s.done, err = true, nil
	}
	if k == 0 {
		s.free <- b[:cap(b)]
		if err != nil {
			s.done = true
		}
		return nil, nil, err
	}
	s.n += int64(k)
	s.pending = err
	return b[:k], func() { s.free <- b[:cap(b)] }, nil
}

func (s *readerSource) close() {}

// pipeline hands every block of src, in order, to each sink; each sink
// runs in its own goroutine. It returns the bytes hashed, once every sink
// has consumed them. stop, if not nil, is polled between blocks; when it
// returns true pipeline returns errStopped. A sink that faults on a
// mapped block (an I/O error under a mapping) makes pipeline return an
// error instead of crashing the program.
func pipeline(src blockSource, sinks []func([]byte), stop func() bool) (int64, error) {
	type block struct {
		b       []byte
		refs    *atomic.Int32
		release func()
	}
	chans := make([]chan block, len(sinks))
	sinkErrs := make([]error, len(sinks))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i, sink := range sinks {
		ch := make(chan block, hashBuffers)
		chans[i] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			debug.SetPanicOnFault(true)
			for k := range ch {
				if sinkErrs[i] == nil {
					if sinkErrs[i] = guardFault(sink, k.b); sinkErrs[i] != nil {
						failed.Store(true)
					}
				}
				if k.refs.Add(-1) == 0 {
					k.release()
				}
			}
		}()
	}
	var n int64
	var err error
	for {
		if stop != nil && stop() {
			err = errStopped
			break
		}
		if failed.Load() {
			break
		}
		var b []byte
		var release func()
		b, release, err = src.next()
		if err != nil || b == nil {
			break
		}
		refs := new(atomic.Int32)
		refs.Store(int32(len(sinks)))
		for _, ch := range chans {
			ch <- block{b, refs, release}
		}
		n += int64(len(b))
	}
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	src.close()
	for _, e := range sinkErrs {
		if e != nil {
			return n, e
		}
	}
	return n, err
}

// guardFault runs sink on b and turns a memory fault (what reading a
// mapped file that can no longer be read causes) into an error.
func guardFault(sink func([]byte), b []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("the file could not be read (memory fault at %#x: %v)", f.Addr(), r)
				return
			}
			panic(r)
		}
	}()
	sink(b)
	return nil
}
