package hfhub

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
)

// resumeRecord is <part>.json: which chunks of the temp file hold verified
// transport-level data (exact 206 answers), written after the data is
// synced. On resume those chunks are not fetched again; they are re-hashed
// from disk with the rest.
type resumeRecord struct {
	Version   int    `json:"version"`
	ETag      string `json:"etag"`
	Size      int64  `json:"size"`
	ChunkSize int64  `json:"chunk_size"`
	Done      []int  `json:"done"`
	// Path and Commit say which repository file this part is (so a later
	// run can remove parts of that file at other ETags).
	Path   string `json:"path,omitempty"`
	Commit string `json:"commit,omitempty"`
}

func readResumeRecord(path string) (*resumeRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxResumeRecord+1))
	if err != nil {
		return nil, err
	}
	return parseResumeRecord(path, b)
}

// maxResumeRecord bounds a resume record (the writer's are a few KiB: one
// index per 16 MiB chunk).
const maxResumeRecord = 64 << 20

// maxChunks bounds the chunks of one file a record may describe.
const maxChunks = 1 << 24

// parseResumeRecord checks a record read from name: version 1, a size in
// (0, maxFileSize], a chunk size in [1, maxFileSize], at most maxChunks
// chunks, and distinct done indices below the chunk count.
func parseResumeRecord(name string, b []byte) (*resumeRecord, error) {
	if len(b) > maxResumeRecord {
		return nil, fmt.Errorf("%s: larger than %d MiB", name, maxResumeRecord>>20)
	}
	var r resumeRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if r.Version != 1 || r.Size <= 0 || r.Size > maxFileSize || r.ChunkSize < 1 || r.ChunkSize > maxFileSize {
		return nil, fmt.Errorf("%s: unusable record (version %d, size %d, chunk size %d)", name, r.Version, r.Size, r.ChunkSize)
	}
	n := (r.Size + r.ChunkSize - 1) / r.ChunkSize // both <= 2^50: no overflow
	if n > maxChunks {
		return nil, fmt.Errorf("%s: %d chunks, more than %d", name, n, maxChunks)
	}
	if int64(len(r.Done)) > n {
		return nil, fmt.Errorf("%s: %d done chunks of %d", name, len(r.Done), n)
	}
	seen := make(map[int]bool, len(r.Done))
	for _, i := range r.Done {
		if i < 0 || int64(i) >= n || seen[i] {
			return nil, fmt.Errorf("%s: bad chunk index %d", name, i)
		}
		seen[i] = true
	}
	return &r, nil
}

// resumeWriter persists the record whenever chunks complete: data first
// (fsync), then the record (atomic replace). One write at a time; marks that
// arrive meanwhile go into the next write.
type resumeWriter struct {
	path   string
	data   *os.File
	mu     sync.Mutex
	rec    resumeRecord
	done   []bool
	kick   chan struct{}
	exited chan struct{}
	err    error
}

func newResumeWriter(path string, data *os.File, rec *resumeRecord, done []bool) *resumeWriter {
	w := &resumeWriter{path: path, data: data, rec: *rec, done: append([]bool(nil), done...),
		kick: make(chan struct{}, 1), exited: make(chan struct{})}
	go w.loop()
	return w
}

func (w *resumeWriter) markDone(i int) {
	w.mu.Lock()
	w.done[i] = true
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *resumeWriter) loop() {
	defer close(w.exited)
	for range w.kick {
		w.flush()
	}
}

func (w *resumeWriter) flush() {
	w.mu.Lock()
	rec := w.rec
	rec.Done = rec.Done[:0:0]
	for i, ok := range w.done {
		if ok {
			rec.Done = append(rec.Done, i)
		}
	}
	w.mu.Unlock()
	if err := w.data.Sync(); err != nil {
		w.err = err
		return
	}
	b, _ := json.Marshal(rec)
	if err := writeFileAtomic(w.path, b, 0o644); err != nil {
		w.err = err
	}
}

// close writes the final state and stops the writer.
func (w *resumeWriter) close() error {
	close(w.kick)
	<-w.exited
	w.flush()
	return w.err
}

// orderedHasher hashes a file chunk by chunk in file order, reading back
// each chunk once it and all before it are on disk, while later chunks are
// still downloading.
type orderedHasher struct {
	f      *os.File
	h      hash.Hash
	size   int64
	chunk  int64
	n      int
	ch     chan int
	exited chan struct{}
	next   int
	err    error
}

func newOrderedHasher(f *os.File, kind HashKind, size, chunk int64, n int) *orderedHasher {
	o := &orderedHasher{f: f, h: newHasher(kind, size), size: size, chunk: chunk, n: n,
		ch: make(chan int, n), exited: make(chan struct{})}
	go o.loop()
	return o
}

func (o *orderedHasher) ready(i int) { o.ch <- i }

func (o *orderedHasher) loop() {
	defer close(o.exited)
	have := make([]bool, o.n)
	buf := make([]byte, 1<<20)
	for i := range o.ch {
		have[i] = true
		for o.err == nil && o.next < o.n && have[o.next] {
			off := int64(o.next) * o.chunk
			end := min(off+o.chunk, o.size)
			for off < end {
				k, err := o.f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
				o.h.Write(buf[:k])
				off += int64(k)
				if err != nil && off < end {
					o.err = err
					break
				}
			}
			o.next++
		}
		if o.next == o.n {
			// drain the rest so senders never block
			for range o.ch {
			}
			return
		}
	}
}

// finish waits for the hash of the whole file (or gives up when aborted).
func (o *orderedHasher) finish(aborted bool) (string, error) {
	close(o.ch)
	<-o.exited
	if aborted {
		return "", nil
	}
	if o.err != nil {
		return "", o.err
	}
	if o.next != o.n {
		return "", fmt.Errorf("hashed %d of %d chunks", o.next, o.n)
	}
	return hex.EncodeToString(o.h.Sum(nil)), nil
}
