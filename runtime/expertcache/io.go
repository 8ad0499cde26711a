package expertcache

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/qpack-go/qpack/runtime"
)

// Align is the alignment of slot buffers and of direct reads (offset,
// length and memory): the largest logical block size in common use.
const Align = 4096

func alignUp(n int64) int64 { return (n + Align - 1) &^ (Align - 1) }

// ioFile is one file the cache reads, opened buffered and, in direct
// mode, also with the page cache bypassed.
type ioFile struct {
	path     string
	buffered *os.File
	direct   *os.File // nil: not available on this file system
	noDirect atomic.Bool
}

// readAt reads extent x into buf[x.BufOffset:]. last says that x ends the
// buffer, so a direct read may round its length up into the buffer's
// alignment padding.
func (f *ioFile) readAt(buf []byte, x runtime.ExpertExtent, last bool) (n int64, direct bool, err error) {
	if f.direct != nil && !f.noDirect.Load() && x.Offset%Align == 0 && x.BufOffset%Align == 0 {
		L := alignUp(x.Size)
		if L == x.Size || (last && x.BufOffset+L <= int64(len(buf))) {
			got, err := f.direct.ReadAt(buf[x.BufOffset:x.BufOffset+L], x.Offset)
			switch {
			case int64(got) >= x.Size && (err == nil || errors.Is(err, io.EOF)):
				return x.Size, true, nil
			case errors.Is(err, syscall.EINVAL):
				// The file system refuses this direct read: use the page
				// cache for this file from now on.
				f.noDirect.Store(true)
			case err == nil || errors.Is(err, io.EOF):
				return int64(got), true, fmt.Errorf("file ends after %d bytes: %w", got, io.ErrUnexpectedEOF)
			default:
				return int64(got), true, err
			}
		}
	}
	got, err := f.buffered.ReadAt(buf[x.BufOffset:x.BufOffset+x.Size], x.Offset)
	if err != nil && errors.Is(err, io.EOF) {
		err = fmt.Errorf("file ends after %d bytes: %w", got, io.ErrUnexpectedEOF)
	}
	return int64(got), false, err
}

// fileSet opens each path once, on first use.
type fileSet struct {
	direct bool
	mu     sync.Mutex
	files  map[string]*ioFile
}

func newFileSet(direct bool) *fileSet { return &fileSet{direct: direct, files: map[string]*ioFile{}} }

func (fs *fileSet) get(path string) (*ioFile, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.files[path]; f != nil {
		return f, nil
	}
	b, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	f := &ioFile{path: path, buffered: b}
	if fs.direct {
		f.direct = openDirect(path) // nil where the file system refuses
	}
	fs.files[path] = f
	return f, nil
}

func (fs *fileSet) close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var first error
	for _, f := range fs.files {
		for _, x := range []*os.File{f.buffered, f.direct} {
			if x != nil {
				if err := x.Close(); err != nil && first == nil {
					first = err
				}
			}
		}
	}
	clear(fs.files)
	return first
}

// OpenDirect opens path for reads that bypass the page cache (O_DIRECT on
// Linux, F_NOCACHE on darwin), or returns nil where that is not available.
// Direct reads need offsets, lengths and buffers aligned to Align.
func OpenDirect(path string) *os.File { return openDirect(path) }

// DirectAvailable reports whether path can be opened for direct reads.
func DirectAvailable(path string) bool {
	f := openDirect(path)
	if f == nil {
		return false
	}
	f.Close()
	return true
}
