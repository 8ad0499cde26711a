package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/repack"
)

// interruptSignals are the signals main turns into a cancelled context.
var interruptSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// TestRepackSIGINT sends a real SIGINT to a repack streaming from a
// throttled fake Hub: it exits 130 with the resume hint, its journal keeps
// all but a tile per connection of what the Hub had sent, and the rerun
// fetches no more than what was not kept plus the shard header.
func TestRepackSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("streams at a throttled rate")
	}
	src, err := filepath.Abs(filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-f32"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		rate        = 1 << 20 // bytes/s per connection
		connections = 2
		rangeSize   = 2 << 20
		tile        = 64 << 10
		// inFlight bounds what the network holds that the repack has not
		// yet read (socket buffers, the client's read buffer) at 1 MiB/s.
		inFlight = 512 << 10
	)
	hub, err := hubtest.NewServer(hubtest.Config{BandwidthPerConn: rate})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	var files []hubtest.File
	var total int64
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lfs := strings.HasSuffix(e.Name(), ".safetensors")
		if lfs {
			total += int64(len(data))
		}
		files = append(files, hubtest.File{Path: e.Name(), Data: data, LFS: lfs})
	}
	hub.MustAddRepo("org/qwen3_next-f32", files, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	out := filepath.Join(t.TempDir(), "m.qpack")
	args := []string{"qpack", "repack", "--from-hf", "org/qwen3_next-f32", "--output", out, "--reserve", "-1",
		"--connections", "2", "--range-size", "2097152", "--tile-size", "65536"}

	// cdn counts the bytes of the CDN's answers, once every answer is
	// logged as ended (the client may finish before the server logs).
	cdn := func() int64 {
		log, _ := hub.SettledRequests()
		var n int64
		for _, r := range log {
			if r.Route == hubtest.RouteCDN {
				n += r.BodyBytes
			}
		}
		return n
	}
	// SIGINT 1.2 s after both connections began their 2 MiB ranges: at
	// 1 MiB/s they are then about 1.2 MiB in. (The log counts a response's
	// bytes only when it ends.)
	bigRanges := func() int {
		n := 0
		for _, r := range hub.Requests() {
			var a, b int64
			if r.Route == hubtest.RouteCDN && r.Range != "" {
				if _, err := fmt.Sscanf(r.Range, "bytes=%d-%d", &a, &b); err == nil && b-a+1 >= 1<<20 {
					n++
				}
			}
		}
		return n
	}
	ctx, stop := signal.NotifyContext(context.Background(), interruptSignals...)
	defer stop()
	sent := make(chan bool, 1)
	go func() {
		deadline := time.After(30 * time.Second)
		for bigRanges() < connections {
			select {
			case <-ctx.Done():
				return
			case <-deadline:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(1200 * time.Millisecond):
		}
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		sent <- true
	}()
	var o, e bytes.Buffer
	code := run(ctx, args, &o, &e)
	stop()
	if code != 130 || strings.TrimSpace(e.String()) != "qpack: "+resumeHint {
		t.Fatalf("interrupted repack: exit %d, stderr %q", code, e.String())
	}
	select {
	case <-sent:
	default:
		t.Fatal("the repack ended before the signal")
	}
	served := cdn()

	// What the journal keeps.
	data, err := os.ReadFile(filepath.Join(out+".partial", repack.JournalName))
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Frontier int `json:"frontier"`
		Partial  []struct {
			Range int   `json:"range"`
			Done  int64 `json:"done"`
		} `json:"partial"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	// One shard: range k is [k*rangeSize, min((k+1)*rangeSize, total)).
	kept := min(int64(j.Frontier)*rangeSize, total)
	for _, p := range j.Partial {
		kept += p.Done
	}
	if len(j.Partial) == 0 {
		t.Errorf("no partial range kept (frontier %d)", j.Frontier)
	}
	if lost, bound := served-kept, int64(connections*(tile+inFlight)); lost > bound {
		t.Errorf("the Hub sent %d bytes, the journal keeps %d: %d lost, bound %d", served, kept, lost, bound)
	}

	// The rerun fetches the rest (and the header the plan reads again).
	hub.ResetLog()
	if stdout, stderr, code := runMain(t, args[1:]...); code != 0 {
		t.Fatalf("rerun: exit %d\n%s%s", code, stdout, stderr)
	}
	hdr := headerSize(t, filepath.Join(src, "model.safetensors"))
	t.Logf("source %d bytes; the Hub sent %d before the interrupt, the journal kept %d (%d ranges complete, %d partial); the rerun fetched %d",
		total, served, kept, j.Frontier, len(j.Partial), cdn())
	if got, bound := cdn(), total-kept+hdr; got > bound {
		t.Errorf("rerun fetched %d bytes; %d were not kept; bound %d", got, total-kept, bound)
	}
	if _, stderr, code := runMain(t, "verify-install", "--no-receipt", "--deep", "--source", src, out); code != 0 {
		t.Errorf("the resumed container does not verify: %s", stderr)
	}
}

// headerSize is 8 + the header length of a safetensors file.
func headerSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	var n int64
	for i := 7; i >= 0; i-- {
		n = n<<8 | int64(b[i])
	}
	return 8 + n
}

// TestDownloadSIGINT: a real SIGINT during a throttled download exits 130
// with the resume hint and nothing on stdout; the rerun completes the file
// and prints the snapshot directory.
func TestDownloadSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("streams at a throttled rate")
	}
	hub, err := hubtest.NewServer(hubtest.Config{BandwidthPerConn: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hub.MustAddRepo("org/big", []hubtest.File{
		{Path: "config.json", Data: []byte(`{}`)},
		{Path: "model.safetensors", Content: hubtest.Pseudo(2<<20, 7), LFS: true},
	}, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	args := []string{"qpack", "download", "org/big", "--cache-dir", t.TempDir(), "--connections", "2"}
	ctx, stop := signal.NotifyContext(context.Background(), interruptSignals...)
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond): // before the file is complete
			syscall.Kill(os.Getpid(), syscall.SIGINT)
		}
	}()
	var o, e bytes.Buffer
	code := run(ctx, args, &o, &e)
	stop()
	if code != 130 || o.Len() != 0 || strings.TrimSpace(e.String()) != "qpack: "+resumeHint {
		t.Fatalf("interrupted download: exit %d, stdout %q, stderr %q", code, o.String(), e.String())
	}
	stdout, stderr, code := runMain(t, args[1:]...)
	if code != 0 {
		t.Fatalf("rerun: exit %d: %s", code, stderr)
	}
	dir := strings.TrimSpace(stdout)
	st, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil || st.Size() != 2<<20 {
		t.Fatalf("rerun left %v, %v", st, err)
	}
}
