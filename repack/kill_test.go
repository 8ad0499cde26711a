//go:build linux

package repack

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/internal/tinymodel"
)

// startChild re-executes the test binary as a repack child.
func startChild(t *testing.T, spec childSpec) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	raw, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stderr
}

// frontierOf reads the journal's frontier (-1 when there is none yet).
func frontierOf(partial string) int {
	data, err := os.ReadFile(filepath.Join(partial, JournalName))
	if err != nil {
		return -1
	}
	var j journal
	if json.Unmarshal(data, &j) != nil {
		return -1
	}
	return j.Frontier
}

type span struct{ off, end int64 }

// completedSpans maps each shard to the source spans of ranges [0, f).
func completedSpans(shardSizes []int64, names []string, rangeSize int64, f int) map[string][]span {
	out := map[string][]span{}
	id := 0
	for si, size := range shardSizes {
		for off := int64(0); off < size; off += rangeSize {
			if id < f {
				out[names[si]] = append(out[names[si]], span{off, min(off+rangeSize, size)})
			}
			id++
		}
	}
	return out
}

func parseRange(h string) (a, b int64, ok bool) {
	s, found := strings.CutPrefix(h, "bytes=")
	if !found {
		return 0, 0, false
	}
	x, y, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	a, err1 := strconv.ParseInt(x, 10, 64)
	b, err2 := strconv.ParseInt(y, 10, 64)
	return a, b, err1 == nil && err2 == nil
}

func TestKillAndResume(t *testing.T) {
	name := "qwen3_5_moe-q4g32"
	src := tiny(t, name, tinymodel.Variants()[4].Spec)
	s := newHub(t, hubtest.Config{})
	repo := "mlx-community/" + name
	s.MustAddRepo(repo, repoFiles(t, src), hubtest.RepoOptions{})

	tmp := t.TempDir()
	ref := filepath.Join(tmp, "ref.qpack")
	refOpts := hubOpts(s, repo, ref)
	if _, err := Run(t.Context(), refOpts); err != nil {
		t.Fatal(err)
	}

	// Shard sizes and header lengths, for reading the request log.
	var names []string
	var sizes []int64
	hdrLen := map[string]int64{}
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			st, _ := os.Stat(filepath.Join(src, e.Name()))
			names = append(names, e.Name())
			sizes = append(sizes, st.Size())
			hdrLen[e.Name()] = readRaw(t, filepath.Join(src, e.Name())).start - 8
		}
	}
	const rangeSize = 16 << 10
	total := 0
	for _, n := range sizes {
		total += int((n + rangeSize - 1) / rangeSize)
	}

	out := filepath.Join(tmp, "out.qpack")
	partial := out + ".partial"
	spec := childSpec{Endpoint: s.URL, Repo: repo, Output: out, RangeSize: rangeSize, Tile: 4 << 10, Connections: 3,
		RangeDelay: 15 * time.Millisecond, FinishDelay: 300 * time.Millisecond}

	// Five distinct random frontiers, in increasing order (each run must
	// get further than the last), then during Finish's hashing, then
	// between the manifest and the rename.
	rng := rand.New(rand.NewPCG(4, 2))
	picked := map[int]bool{}
	for len(picked) < 5 {
		picked[1+rng.IntN(total-2)] = true
	}
	var ks []int
	for k := range picked {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var points []string
	for _, k := range ks {
		points = append(points, strconv.Itoa(k))
	}
	points = append(points, "finish", "rename", "rename-late")

	prevFrontier := 0
	for _, p := range points {
		s.ResetLog()
		var manifestSeen chan struct{}
		switch p {
		case "rename":
			manifestSeen = watchFor(t, partial, "manifest.json", unix.IN_CREATE|unix.IN_MOVED_TO)
		case "rename-late":
			// Finish removes the journal with its other working files
			// right before the rename.
			manifestSeen = watchFor(t, partial, JournalName, unix.IN_DELETE)
		}
		cmd, stderr := startChild(t, spec)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		killed, missedRename := false, false
		tick := time.NewTicker(time.Millisecond)
	wait:
		for {
			select {
			case err := <-exited:
				if (p == "rename" || p == "rename-late") && err == nil {
					// The window between the manifest and the rename is
					// under a millisecond; on a loaded machine the child
					// can finish before the signal lands. The container is
					// then complete, which the final run checks like any
					// other; the remaining rename points cannot be reached.
					t.Logf("kill point %s missed: the child finished first; skipping the remaining rename points", p)
					missedRename = true
					break wait
				}
				t.Fatalf("kill point %s never reached: the child ended first (%v)\n%s", p, err, stderr)
			case <-manifestSeen:
				// inotify told us Finish just renamed the manifest into
				// the partial directory: the container is about to be
				// renamed into place.
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
				break wait
			case <-tick.C:
				var hit bool
				switch p {
				case "finish":
					hit = frontierOf(partial) == total
				case "rename", "rename-late":
				default:
					k, _ := strconv.Atoi(p)
					hit = frontierOf(partial) >= k
				}
				if hit {
					cmd.Process.Signal(syscall.SIGKILL)
					killed = true
					break wait
				}
			}
		}
		tick.Stop()
		if missedRename {
			break
		}
		<-exited
		if !killed {
			t.Fatalf("kill point %s not reached", p)
		}
		// What the log says about this run: no range completed before it
		// was fetched again.
		done := completedSpans(sizes, names, rangeSize, prevFrontier)
		for _, r := range s.Requests() {
			if r.Route != hubtest.RouteCDN || r.Method != "GET" {
				continue
			}
			a, b, ok := parseRange(r.Range)
			if !ok {
				t.Errorf("CDN request without a byte range: %+v", r)
				continue
			}
			if (a == 0 && b == 7) || (a == 8 && b == 8+hdrLen[r.File]-1) {
				continue // the header reads of planning
			}
			for _, sp := range done[r.File] {
				if a < sp.end && b >= sp.off {
					t.Errorf("kill point %s: %s bytes %d-%d fetched again, but range [%d, %d) was complete", p, r.File, a, b, sp.off, sp.end)
				}
			}
		}
		state := "partial"
		if _, err := os.Lstat(out); err == nil {
			state = "placed"
		} else if _, err := os.Lstat(filepath.Join(partial, "manifest.json")); err == nil {
			state = "manifest written"
		}
		f := frontierOf(partial)
		t.Logf("kill at %s: journal frontier %d of %d, state %s", p, f, total, state)
		if state == "placed" {
			// The signal landed after the rename (its window is under a
			// millisecond): the partial directory is gone, so the later
			// rename points, which watch it, cannot be reached. The final
			// run checks the placed container like any other.
			t.Logf("kill point %s landed after the rename; skipping the remaining points", p)
			break
		}
		if f >= 0 {
			prevFrontier = f
		} else if state != "partial" {
			prevFrontier = total
		}
	}
	// The last run, uninterrupted.
	s.ResetLog()
	cmd, stderr := startChild(t, childSpec{Endpoint: s.URL, Repo: repo, Output: out, RangeSize: rangeSize, Tile: 4 << 10, Connections: 3})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("final run: %v\n%s", err, stderr)
	}
	sameContainer(t, ref, out, false)
	checkAgainstSource(t, src, out)
	for _, p := range []string{partial, out + ".lock"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
}

// watchFor returns a channel closed when an event of mask happens to a file
// called name in dir, using inotify so the kill lands within
// microseconds.
func watchFor(t *testing.T, dir, name string, mask uint32) chan struct{} {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				if strings.TrimRight(string(nameBytes), "\x00") == name {
					close(ch)
					return
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return ch
}
