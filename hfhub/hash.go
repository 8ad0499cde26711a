package hfhub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
)

// HashKind names how a file's content is checked.
type HashKind string

const (
	HashSHA256  HashKind = "sha256"   // LFS files: sha256 of the content
	HashGitSHA1 HashKind = "git-sha1" // regular files: sha1 of "blob <size>\x00" + content
)

// Digest is the expected hash of a file.
type Digest struct {
	Kind HashKind
	Hex  string
}

// ExpectedDigest returns the hash the content of f must have.
func (f FileInfo) ExpectedDigest() Digest {
	if f.LFS != nil {
		return Digest{HashSHA256, f.LFS.SHA256}
	}
	return Digest{HashGitSHA1, f.BlobID}
}

// digestForETag derives the expected digest from an ETag: 64 hex is a
// sha256, 40 hex a git blob sha1.
func digestForETag(etag string) (Digest, bool) {
	switch {
	case isSHA256(etag):
		return Digest{HashSHA256, etag}, true
	case isSHA1(etag):
		return Digest{HashGitSHA1, etag}, true
	}
	return Digest{}, false
}

// newHasher returns a hash for kind, already primed with the git blob
// header when needed.
func newHasher(kind HashKind, size int64) hash.Hash {
	if kind == HashSHA256 {
		return sha256.New()
	}
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	return h
}

// GitBlobSHA1 returns the git blob id of data.
func GitBlobSHA1(data []byte) string {
	h := newHasher(HashGitSHA1, int64(len(data)))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}
