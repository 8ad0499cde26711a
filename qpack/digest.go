package qpack

import (
	"encoding/hex"
	"fmt"
	"io"

	"github.com/zeebo/blake3"
)

const hashChunk = 4 << 20

// DigestFile returns the lowercase hex BLAKE3-256 digest of everything r
// yields (what b3sum prints). progress, if not nil, is called with the number
// of bytes hashed since its previous call.
func DigestFile(r io.Reader, progress func(n int64)) (string, error) {
	h := blake3.New()
	buf := make([]byte, hashChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			if progress != nil {
				progress(int64(n))
			}
		}
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// DigestLayer reads a layer file of expertCount blobs of stride bytes from r
// once and returns the digest of the whole file and one digest per expert
// blob (each over its full stride, padding included). It fails if r ends
// before expertCount x stride bytes or yields more.
func DigestLayer(r io.Reader, expertCount int, stride int64, progress func(n int64)) (file string, experts []string, err error) {
	fh := blake3.New()
	eh := blake3.New()
	buf := make([]byte, min(int64(hashChunk), stride))
	experts = make([]string, 0, expertCount)
	for e := 0; e < expertCount; e++ {
		eh.Reset()
		for left := stride; left > 0; {
			p := buf[:min(int64(len(buf)), left)]
			if _, err := io.ReadFull(r, p); err != nil {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					err = fmt.Errorf("file ends inside expert %d", e)
				}
				return "", nil, fmt.Errorf("expert %d: %w", e, err)
			}
			fh.Write(p)
			eh.Write(p)
			left -= int64(len(p))
			if progress != nil {
				progress(int64(len(p)))
			}
		}
		experts = append(experts, hex.EncodeToString(eh.Sum(nil)))
	}
	var one [1]byte
	if n, _ := io.ReadFull(r, one[:]); n != 0 {
		return "", nil, fmt.Errorf("file is longer than %d experts x %d bytes", expertCount, stride)
	}
	return hex.EncodeToString(fh.Sum(nil)), experts, nil
}
