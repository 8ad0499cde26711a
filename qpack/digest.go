package qpack

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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
	return digestFile(r, progress, nil)
}

func digestFile(r io.Reader, progress func(n int64), stop func() bool) (string, error) {
	h := blake3.New()
	_, err := pipeline(r, -1, []func([]byte){func(b []byte) {
		h.Write(b)
		if progress != nil {
			progress(int64(len(b)))
		}
	}}, stop)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
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

func digestLayer(r io.Reader, expertCount int, stride int64, progress func(n int64), stop func() bool) (file string, experts []string, err error) {
	if expertCount <= 0 || stride <= 0 || stride > (1<<62)/int64(expertCount) {
		return "", nil, fmt.Errorf("bad layer shape: %d experts x %d bytes", expertCount, stride)
	}
	total := int64(expertCount) * stride
	fh := blake3.New()
	eh := blake3.New()
	experts = make([]string, 0, expertCount)
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
	n, err := pipeline(r, total, []func([]byte){fileSink, expertSink}, stop)
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
	if len(experts) != expertCount {
		return "", nil, fmt.Errorf("internal error: %d expert digests for %d experts", len(experts), expertCount)
	}
	return hex.EncodeToString(fh.Sum(nil)), experts, nil
}

// pipeline reads r in blocks and hands every block, in order, to each sink;
// each sink runs in its own goroutine, and a block's buffer is read into
// again only after every sink is done with it. With limit >= 0 it reads
// exactly limit bytes (io.ErrUnexpectedEOF or io.EOF if r ends first);
// with limit < 0 it reads to EOF. It returns the bytes read, once every
// sink has consumed them. stop, if not nil, is polled between blocks; when
// it returns true pipeline returns errStopped.
func pipeline(r io.Reader, limit int64, sinks []func([]byte), stop func() bool) (int64, error) {
	size := int64(hashBlock)
	if limit >= 0 {
		size = max(1, min(size, limit))
	}
	type block struct {
		b    []byte
		refs *atomic.Int32
	}
	free := make(chan []byte, hashBuffers)
	for i := 0; i < hashBuffers; i++ {
		free <- make([]byte, size)
	}
	chans := make([]chan block, len(sinks))
	var wg sync.WaitGroup
	for i, sink := range sinks {
		ch := make(chan block, hashBuffers)
		chans[i] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range ch {
				sink(k.b)
				if k.refs.Add(-1) == 0 {
					free <- k.b[:cap(k.b)]
				}
			}
		}()
	}
	var n int64
	var err error
	for limit < 0 || n < limit {
		if stop != nil && stop() {
			err = errStopped
			break
		}
		b := <-free
		if limit >= 0 {
			b = b[:min(int64(len(b)), limit-n)]
		}
		var k int
		if limit >= 0 {
			k, err = io.ReadFull(r, b)
		} else {
			k, err = readFullOrEOF(r, b)
		}
		if k > 0 {
			refs := new(atomic.Int32)
			refs.Store(int32(len(sinks)))
			for _, ch := range chans {
				ch <- block{b[:k], refs}
			}
			n += int64(k)
		} else {
			free <- b
		}
		if err != nil {
			break
		}
	}
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	if limit < 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// readFullOrEOF fills b from r, stopping early only at EOF (returned with
// the bytes read, possibly none).
func readFullOrEOF(r io.Reader, b []byte) (int, error) {
	n, err := io.ReadFull(r, b)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}
