package hfhub

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestMain doubles as the child process of the kill -9 tests: with
// HFHUB_TEST_CHILD=download it runs one Download from the environment's
// settings and exits.
func TestMain(m *testing.M) {
	if os.Getenv("HFHUB_TEST_CHILD") == "download" {
		os.Exit(childDownload())
	}
	os.Exit(m.Run())
}

func childDownload() int {
	chunk, _ := strconv.ParseInt(os.Getenv("HFHUB_CHILD_CHUNK"), 10, 64)
	conns, _ := strconv.Atoi(os.Getenv("HFHUB_CHILD_CONNS"))
	c, err := NewClient(Options{
		Endpoint: os.Getenv("HFHUB_CHILD_ENDPOINT"), Anonymous: true,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond,
		StallTimeout: 2 * time.Second, UserAgent: os.Getenv("HFHUB_CHILD_UA"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Download(ctx, DownloadRequest{
		Repo: os.Getenv("HFHUB_CHILD_REPO"), CacheDir: os.Getenv("HFHUB_CHILD_CACHE"),
		ChunkSize: chunk, Connections: conns,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
