package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
)

func sha1sum(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

func sha256sum(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}
