package verify

import (
	"context"
	"sort"
	"sync"
)

// share runs the digest pass and the deep stream at once, so that each
// container file the deep check compares is read from the disk once: the
// digest pass reads it sequentially and leaves its pages in the page cache,
// and the deep stream's comparisons then read them from memory (dropping
// them as they go). It is the jobQueue of the digest workers.
//
// The page cache is the buffer, bounded by a window: a file is hashed ahead
// of need only while the bytes hashed and not yet compared, plus its own,
// fit in the window. A deep stream that needs a file not hashed yet waits
// for it, and the file's jobs then go first, window or not (so nothing
// waits for ever: at most one file per stream more). Files larger than the
// window, and files the deep check does not compare, are hashed as in a
// digest pass alone (pages dropped), and the deep check reads what it
// compares of them from the disk.
//
// The comparisons read a shared file through a read-only memory mapping
// (no copy out of the page cache); a fault on it (the file truncated
// meanwhile) becomes a read error, not a crash. If the kernel evicts pages
// early, they are read from the disk again: slower, never wrong. The pages
// of a file are dropped when no stream needs it any more.
type share struct {
	v      *verifier
	window int64

	mu       sync.Mutex
	cond     *sync.Cond
	pending  []*job // jobs not handed out: shared files in order of need, then the others
	files    map[string]*sharedFile
	held     int64 // bytes of shared files admitted and not yet released
	wantSeq  int
	deepDone bool
	stopped  bool
}

// sharedFile is a container file both passes read.
type sharedFile struct {
	name     string
	size     int64
	order    int // rank in order of need
	jobsLeft int
	ready    chan struct{} // closed when every job of the file has finished
	users    int           // deep streams that still have to compare bytes of it
	admitted bool
	released bool
	want     int // > 0: a deep stream waits for it (the order it asked in)

	mapOnce sync.Once
	view    []byte // the mapping, nil if none
}

// newShare plans the sharing of the jobs with the deep streams' segments
// (perShard, each sorted by source offset; shards are streamed in order).
func newShare(v *verifier, jobs []*job, perShard [][]segment, window int64) *share {
	s := &share{v: v, window: window, files: map[string]*sharedFile{}}
	s.cond = sync.NewCond(&s.mu)
	jobsOf := map[string]int{}
	for _, j := range jobs {
		jobsOf[j.file]++
	}
	for _, segs := range perShard {
		seen := map[string]bool{}
		for _, sg := range segs {
			if seen[sg.file] {
				continue
			}
			seen[sg.file] = true
			f := s.files[sg.file]
			if f == nil {
				size := v.man.Files[sg.file]
				if jobsOf[sg.file] == 0 || size > window {
					continue
				}
				f = &sharedFile{name: sg.file, size: size, order: len(s.files), jobsLeft: jobsOf[sg.file], ready: make(chan struct{})}
				s.files[sg.file] = f
			}
			f.users++
		}
	}
	s.pending = append([]*job(nil), jobs...)
	sort.SliceStable(s.pending, func(a, b int) bool {
		fa, fb := s.files[s.pending[a].file], s.files[s.pending[b].file]
		switch {
		case fa != nil && fb != nil:
			return fa.order < fb.order
		default:
			return fa != nil && fb == nil
		}
	})
	return s
}

// watch wakes the waiting workers when ctx is done; call the returned
// function when finished.
func (s *share) watch(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.stopped = true
		s.cond.Broadcast()
		s.mu.Unlock()
	})
}

// next picks, in this order: a job of a file a deep stream waits for
// (the earliest asked first); a job of a file already admitted; a job of a
// file the deep check does not share; the job of the next file in order of
// need, if it fits in the window (or nothing is held, or the deep streams
// are done).
func (s *share) next(ctx context.Context) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.stopped || ctx.Err() != nil || len(s.pending) == 0 {
			return nil
		}
		best, class, key := -1, 4, 0
		firstNew := true
		for i, j := range s.pending {
			f := s.files[j.file]
			c, k := 4, i
			switch {
			case f == nil:
				c = 2
			case f.want > 0:
				c, k = 0, f.want
			case f.admitted:
				c = 1
			case firstNew:
				firstNew = false
				if s.deepDone || s.held == 0 || s.held+f.size <= s.window {
					c = 3
				}
			}
			if c < class || c == class && k < key {
				best, class, key = i, c, k
			}
		}
		if best >= 0 {
			j := s.pending[best]
			s.pending = append(s.pending[:best], s.pending[best+1:]...)
			if f := s.files[j.file]; f != nil && !f.admitted {
				f.admitted = true
				s.held += f.size
			}
			return j
		}
		s.cond.Wait()
	}
}

func (s *share) done(j *job) {
	f := s.files[j.file]
	if f == nil {
		return
	}
	s.mu.Lock()
	f.jobsLeft--
	last := f.jobsLeft == 0
	released := f.released
	s.mu.Unlock()
	if last {
		close(f.ready)
		if released {
			s.drop(f.name) // released early (a stream gave up): hashed since
		}
	}
}

func (s *share) keep(file string) bool { return s.files[file] != nil }

// await blocks until file, if shared, has been hashed (its pages are then
// in the page cache).
func (s *share) await(ctx context.Context, file string) error {
	f := s.files[file]
	if f == nil {
		return nil
	}
	select {
	case <-f.ready:
		return nil
	default:
	}
	s.ask(f)
	select {
	case <-f.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// ask puts the jobs of f first.
func (s *share) ask(f *sharedFile) {
	s.mu.Lock()
	if f.want == 0 {
		s.wantSeq++
		f.want = s.wantSeq
		s.cond.Broadcast()
	}
	s.mu.Unlock()
}

// view returns a read-only mapping of a shared file that has been hashed,
// nil for any other file or when it cannot be mapped (the caller reads it
// then).
func (s *share) view(file string) []byte {
	f := s.files[file]
	if f == nil {
		return nil
	}
	select {
	case <-f.ready:
	default:
		return nil
	}
	f.mapOnce.Do(func() {
		if f.size <= 0 || int64(int(f.size)) != f.size {
			return
		}
		fd, err := s.v.open(file)
		if err != nil {
			return
		}
		defer fd.Close()
		if m, err := mapFile(fd, int(f.size)); err == nil {
			f.view = m
		}
	})
	return f.view
}

// release notes that a deep stream has finished with file (compared all of
// its bytes it maps there, or given up). When no stream needs it any more
// its mapping is removed and its pages are dropped. No comparison of the
// file may be running or start after the last release.
func (s *share) release(file string) {
	f := s.files[file]
	if f == nil {
		return
	}
	s.mu.Lock()
	f.users--
	free := f.users == 0 && !f.released
	hashed := f.jobsLeft == 0
	if free {
		f.released = true
		s.held -= f.size
		s.cond.Broadcast()
	}
	s.mu.Unlock()
	if free {
		s.unmap(f)
		if hashed {
			s.drop(file)
		}
	}
}

func (s *share) unmap(f *sharedFile) {
	f.mapOnce.Do(func() {}) // no mapping from now on
	if f.view != nil {
		unmapFile(f.view)
		f.view = nil
	}
}

// finishDeep lets the remaining jobs run without waiting for the window.
func (s *share) finishDeep() {
	s.mu.Lock()
	s.deepDone = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// cleanup drops what no stream released (after a failure); every stream
// has finished.
func (s *share) cleanup() {
	for name, f := range s.files {
		if !f.released {
			f.released = true
			s.unmap(f)
			s.drop(name)
		}
	}
}

func (s *share) drop(file string) {
	if s.v.o.KeepCache {
		return
	}
	f, err := s.v.open(file)
	if err != nil {
		return
	}
	dropCache(f, 0, 0)
	f.Close()
}
