package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Content is the bytes of a served file.
type Content interface {
	io.ReaderAt
	Size() int64
}

// Bytes serves b.
func Bytes(b []byte) Content { return bytesContent{bytes.NewReader(b)} }

type bytesContent struct{ *bytes.Reader }

func (b bytesContent) Size() int64 { return b.Reader.Size() }

// Pseudo is size bytes of deterministic pseudo-random data derived from seed,
// generated on the fly (nothing is stored), for large test files.
func Pseudo(size int64, seed uint64) Content { return pseudo{size: size, seed: seed} }

type pseudo struct {
	size int64
	seed uint64
}

func (p pseudo) Size() int64 { return p.size }

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (p pseudo) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset")
	}
	if off >= p.size {
		return 0, io.EOF
	}
	n := len(b)
	var err error
	if int64(n) > p.size-off {
		n = int(p.size - off)
		err = io.EOF
	}
	var word [8]byte
	i := 0
	for i < n {
		pos := off + int64(i)
		w := uint64(pos) >> 3
		binary.LittleEndian.PutUint64(word[:], splitmix(w^p.seed))
		k := copy(b[i:n], word[pos&7:])
		i += k
	}
	return n, err
}

// fileContent serves a file from disk.
type fileContent struct {
	f    *os.File
	size int64
}

func (f fileContent) ReadAt(b []byte, off int64) (int, error) { return f.f.ReadAt(b, off) }
func (f fileContent) Size() int64                             { return f.size }

// blob is one file's content with the identifiers the Hub derives from it.
type blob struct {
	content    Content
	size       int64
	gitSHA1    string // git blob id of the content
	sha256     string
	lfs        bool
	pointer    []byte // LFS pointer text (LFS files)
	pointerOID string // git blob id of the pointer: the tree "oid" of an LFS file
}

// Digested is a Content that knows its own git blob id and SHA-256 (hex),
// so that serving it does not read it all first (generated files of tens
// of GB); the server trusts them.
type Digested interface {
	Content
	Digests() (gitSHA1, sha256 string)
}

func newBlob(c Content, lfs bool) (*blob, error) {
	size := c.Size()
	if d, ok := c.(Digested); ok {
		g, s := d.Digests()
		return finishBlob(&blob{content: c, size: size, gitSHA1: g, sha256: s, lfs: lfs}), nil
	}
	g := sha1.New()
	fmt.Fprintf(g, "blob %d\x00", size)
	s := sha256.New()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n, err := c.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		g.Write(buf[:n])
		s.Write(buf[:n])
		off += int64(n)
		if err != nil && off < size {
			return nil, err
		}
	}
	return finishBlob(&blob{content: c, size: size, gitSHA1: hex.EncodeToString(g.Sum(nil)), sha256: hex.EncodeToString(s.Sum(nil)), lfs: lfs}), nil
}

// finishBlob adds the LFS pointer of an LFS blob.
func finishBlob(b *blob) *blob {
	if b.lfs {
		b.pointer = []byte("version https://git-lfs.github.com/spec/v1\noid sha256:" + b.sha256 + "\nsize " + strconv.FormatInt(b.size, 10) + "\n")
		b.pointerOID = gitBlobID(b.pointer)
	}
	return b
}

// oid is what the tree listing and ETag call this file: the git blob id of
// the content, or of the pointer for LFS files.
func (b *blob) oid() string {
	if b.lfs {
		return b.pointerOID
	}
	return b.gitSHA1
}

func gitBlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}
