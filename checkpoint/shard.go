package checkpoint

import (
	"context"
	"io"
	"os"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/safetensors"
)

// Shard is one safetensors file of a source: random access to its bytes
// (a local file, or HTTP range requests), its parsed header, the bytes that
// header was parsed from, and the digest its content must have.
type Shard struct {
	name       string
	src        string // the source, for messages
	size       int64
	mtime      int64
	header     *safetensors.Header
	raw        []byte
	expect     hfhub.Digest
	expectFrom string

	file   *os.File // local (directory or cache blob)
	path   string
	remote *hfhub.RemoteFile
}

// Name is the shard's path in the checkpoint.
func (s *Shard) Name() string { return s.name }

// Size is the shard's size in bytes.
func (s *Shard) Size() int64 { return s.size }

// Header is the shard's parsed safetensors header.
func (s *Shard) Header() *safetensors.Header { return s.header }

// HeaderBytes are the bytes Header was parsed from: the 8-byte length and
// the JSON, i.e. the shard's first Header().DataStart bytes. A reader that
// hashes the shard must check that its hashed stream starts with them
// (StreamCheck).
func (s *Shard) HeaderBytes() []byte { return s.raw }

// Expect is the digest the shard's bytes must have (Kind "" when the
// source publishes none) and ExpectFrom who says so.
func (s *Shard) Expect() hfhub.Digest { return s.expect }
func (s *Shard) ExpectFrom() string   { return s.expectFrom }

// SHA256 is the expected sha256 in lowercase hex, or "".
func (s *Shard) SHA256() string {
	if s.expect.Kind == hfhub.HashSHA256 {
		return s.expect.Hex
	}
	return ""
}

// GitBlobSHA1 is the expected git blob id of a shard published as a
// regular (non-LFS) file, or "".
func (s *Shard) GitBlobSHA1() string {
	if s.expect.Kind == hfhub.HashGitSHA1 {
		return s.expect.Hex
	}
	return ""
}

// File is the open local file holding the shard (nil when it is read from
// the Hub); Path its path.
func (s *Shard) File() *os.File { return s.file }
func (s *Shard) Path() string   { return s.path }

// Remote reports whether the shard is read from the Hub.
func (s *Shard) Remote() bool { return s.remote != nil }

// ModTime is a local shard's modification time in Unix nanoseconds (0 for
// a remote one).
func (s *Shard) ModTime() int64 { return s.mtime }

// ReadAt implements io.ReaderAt.
func (s *Shard) ReadAt(p []byte, off int64) (int, error) {
	if s.remote != nil {
		return s.remote.ReadAt(p, off)
	}
	return s.file.ReadAt(p, off)
}

// ReadAtContext is ReadAt honouring ctx for a remote shard.
func (s *Shard) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if s.remote != nil {
		return s.remote.ReadAtContext(ctx, p, off)
	}
	return s.file.ReadAt(p, off)
}

// StreamRange calls fn with a reader of exactly the n bytes at off: one
// validated range request for a remote shard (resumed by the client after
// cuts and stalls), a section of the file for a local one.
func (s *Shard) StreamRange(ctx context.Context, off, n int64, fn func(body io.Reader) error) error {
	if s.remote != nil {
		return s.remote.ReadRanges(ctx, []hfhub.Range{{Off: off, Len: n}}, 1, func(_ hfhub.Range, body io.Reader) error {
			return fn(body)
		})
	}
	return fn(io.NewSectionReader(s.file, off, n))
}

func (s *Shard) where() string {
	if s.path != "" {
		return s.path
	}
	return s.src + "/" + s.name
}

func (s *Shard) closeFile() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}
