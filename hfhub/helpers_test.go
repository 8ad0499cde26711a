package hfhub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newHub(t testing.TB, cfg hubtest.Config) *hubtest.Server {
	t.Helper()
	s, err := hubtest.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testOptions: tiny backoffs so failure tests run in milliseconds; debug
// logs go to the returned buffer. Stall tests shorten StallTimeout
// themselves (fastStall); the default stays long enough that a loaded
// machine does not trip it.
func testOptions(hub *hubtest.Server) (Options, *syncBuffer) {
	logs := &syncBuffer{}
	return Options{
		Endpoint:      hub.URL,
		Anonymous:     true,
		MaxRetries:    4,
		RetryWaitMin:  time.Millisecond,
		RetryWaitMax:  5 * time.Millisecond,
		MaxRetryAfter: 50 * time.Millisecond,
		StallTimeout:  2 * time.Second,
		Hedge:         HedgeOptions{MinWait: 150 * time.Millisecond, Interval: 25 * time.Millisecond},
		Logger:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, logs
}

func newTestClient(t testing.TB, hub *hubtest.Server, mod func(*Options)) (*Client, *syncBuffer) {
	t.Helper()
	o, logs := testOptions(hub)
	if mod != nil {
		mod(&o)
	}
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, logs
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readSnapshotFile reads a file through the snapshot symlink.
func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// listTree returns all paths under dir (relative, slash-separated), with
// symlinks marked "->target".
func listTree(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if info.Mode()&os.ModeSymlink != 0 {
			tgt, _ := os.Readlink(p)
			rel += " -> " + tgt
		} else if info.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	return out
}

func mustNotContain(t testing.TB, what, haystack, needle string) {
	t.Helper()
	if needle != "" && strings.Contains(haystack, needle) {
		t.Errorf("%s contains %q", what, needle)
	}
}

var _ = io.EOF

// fastStall makes an attempt stall out after 250 ms without a byte.
func fastStall(o *Options) { o.StallTimeout = 250 * time.Millisecond }
