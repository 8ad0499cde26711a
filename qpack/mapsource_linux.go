//go:build linux

package qpack

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// mapWindow is how much of a file is mapped at a time; at most mapWindows
// windows are mapped at once.
const (
	mapWindow  = 8 << 20
	mapWindows = 3
)

// mapSource yields a file's bytes from read-only shared mappings of
// mapWindow bytes: the hashes read the page cache directly, with no copy
// into a buffer. A window is unmapped once all its blocks are released.
type mapSource struct {
	fd   int
	size int64
	off  int64
	win  *window
	sem  chan struct{}
}

type window struct {
	m    []byte
	off  int64 // file offset of m[0]
	refs atomic.Int32
	sem  chan struct{}
}

func (w *window) release() {
	if w.refs.Add(-1) == 0 {
		unix.Munmap(w.m)
		<-w.sem
	}
}

// mapSourceFor returns a mapSource over the first size bytes of f.
func mapSourceFor(f *os.File, size int64) (blockSource, bool, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, false, nil
	}
	fd := -1
	if err := sc.Control(func(v uintptr) { fd = int(v) }); err != nil || fd < 0 {
		return nil, false, nil
	}
	// The mappings keep their own reference to the file; the descriptor
	// is only used while f is open (the caller closes f after the
	// digest).
	return &mapSource{fd: fd, size: size, sem: make(chan struct{}, mapWindows)}, true, nil
}

func (s *mapSource) next() ([]byte, func(), error) {
	if s.off >= s.size {
		s.dropWindow()
		return nil, nil, nil
	}
	if s.win == nil || s.off >= s.win.off+int64(len(s.win.m)) {
		s.dropWindow()
		n := min(mapWindow, s.size-s.off)
		s.sem <- struct{}{}
		m, err := unix.Mmap(s.fd, s.off, int(n), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			<-s.sem
			return nil, nil, err
		}
		unix.Madvise(m, unix.MADV_WILLNEED)
		s.win = &window{m: m, off: s.off, sem: s.sem}
		s.win.refs.Store(1) // the source's own reference
	}
	w := s.win
	start := s.off - w.off
	n := min(int64(hashBlock), int64(len(w.m))-start)
	w.refs.Add(1)
	s.off += n
	return w.m[start : start+n], w.release, nil
}

func (s *mapSource) dropWindow() {
	if s.win != nil {
		s.win.release()
		s.win = nil
	}
}

func (s *mapSource) close() { s.dropWindow() }
