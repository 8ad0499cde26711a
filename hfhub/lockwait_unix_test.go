//go:build unix

package hfhub

import (
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// A download waiting on another's lock of the same blob says so (once),
// then proceeds when the lock is released.
func TestLockWaitIsNamed(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	files := faultRepo()
	hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	c, logs := newTestClient(t, hub, nil)
	cache := t.TempDir()
	held, err := acquireLock(ctxT(t), newCacheRepo(cache, "org/m").lockPath(etagOf(files[1])), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "waiting for another download") {
		if time.Now().After(deadline) {
			t.Fatal("the wait was never reported")
		}
		time.Sleep(50 * time.Millisecond)
	}
	held.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "waiting for another download"); n != 1 {
		t.Fatalf("reported %d times", n)
	}
}
