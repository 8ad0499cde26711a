// Command download benchmarks qpack's Hub downloader on loopback: a fake Hub
// (hfhub/hubtest) serves one large LFS file generated on the fly, capping
// every connection's bandwidth, and the downloader fetches it into a fresh
// cache with 1 connection (the baseline) and then with N, in one run. Each
// download runs in a child process so its peak RSS is measured alone.
//
//	go run ./bench/download                 # 2 GiB, 50 MB/s per connection, 1 vs 8
//	go run ./bench/download -size 256MiB -conns 1,4,8
//	go run ./bench/download -size 512MiB -cap 25MB -hedge
//
// With -hedge it then downloads again with the last connection count while
// one CDN connection (the third of that run) is capped at -slow bytes/s,
// and prints that time against the no-fault time of the same run.
//
// Goals: N=8 at least 6x faster than 1 connection; peak RSS under 64 MiB
// whatever the file size; the hedged run at most 1.3x the no-fault time
// plus the detection time (hfhub.HedgeOptions: MinWait + Interval).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
)

func main() {
	var (
		sizeS  = flag.String("size", "2GiB", "file size (B, KiB, MiB, GiB, or MB/GB)")
		capS   = flag.String("cap", "50MB", "bandwidth cap per connection, per second")
		connsS = flag.String("conns", "1,8", "connection counts to compare; the first is the baseline")
		chunkS = flag.String("chunk", "16MiB", "range size")
		dir    = flag.String("dir", os.TempDir(), "where the caches go (each is deleted after its run)")
		role   = flag.String("role", "", "internal: child process")
		ep     = flag.String("endpoint", "", "internal")
		cache  = flag.String("cache", "", "internal")
		conns  = flag.Int("n", 0, "internal")
		hedge  = flag.Bool("hedge", false, "also run the hedging case: one connection capped at -slow among the last -conns")
		slowS  = flag.String("slow", "8KiB", "-hedge: the capped connection's bytes per second")
	)
	flag.Parse()
	chunk, err := parseSize(*chunkS)
	check(err)
	if *role == "client" {
		os.Exit(child(*ep, *cache, *conns, chunk))
	}
	size, err := parseSize(*sizeS)
	check(err)
	bw, err := parseSize(*capS)
	check(err)
	var counts []int
	for _, s := range strings.Split(*connsS, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			check(fmt.Errorf("bad -conns %q", *connsS))
		}
		counts = append(counts, n)
	}

	fmt.Printf("bench/download: %s file, %s/s per connection, %s ranges, connections %v, %d CPUs\n",
		human(size), human(bw), human(chunk), counts, runtime.NumCPU())
	t0 := time.Now()
	hub, err := hubtest.NewServer(hubtest.Config{BandwidthPerConn: bw})
	check(err)
	defer hub.Close()
	_, err = hub.AddRepo("bench/big", []hubtest.File{{Path: "model.safetensors", Content: hubtest.Pseudo(size, 42), LFS: true}}, hubtest.RepoOptions{})
	check(err)
	fmt.Printf("fake Hub ready in %.1fs (content hashed once for its X-Linked-Etag)\n", time.Since(t0).Seconds())

	exe, err := os.Executable()
	check(err)
	type result struct {
		n      int
		secs   float64
		rssMiB float64
	}
	var results []result
	for _, n := range counts {
		cacheDir, err := os.MkdirTemp(*dir, "qpack-bench-")
		check(err)
		cmd := exec.Command(exe, "-role=client", "-endpoint="+hub.URL, "-cache="+cacheDir, "-n="+strconv.Itoa(n), "-chunk="+*chunkS)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		start := time.Now()
		err = cmd.Run()
		secs := time.Since(start).Seconds()
		os.RemoveAll(cacheDir)
		check(err)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		r := result{n: n, secs: secs, rssMiB: float64(ru.Maxrss) / 1024} // Linux: KiB
		results = append(results, r)
		fmt.Printf("  %2d connection(s): %6.2fs  %7.1f MB/s  peak RSS %5.1f MiB\n", n, secs, float64(size)/secs/1e6, r.rssMiB)
	}
	if *hedge {
		slow, err := parseSize(*slowS)
		check(err)
		n := counts[len(counts)-1]
		conn := 0
		for _, r := range hub.Requests() {
			if r.Role == "cdn" {
				conn = max(conn, r.Conn)
			}
		}
		hub.Inject(hubtest.Fault{Kind: hubtest.FaultTrickle, Route: hubtest.RouteCDN, Conn: conn + 3, Rate: slow, Times: -1})
		cacheDir, err := os.MkdirTemp(*dir, "qpack-bench-")
		check(err)
		cmd := exec.Command(exe, "-role=client", "-endpoint="+hub.URL, "-cache="+cacheDir, "-n="+strconv.Itoa(n), "-chunk="+*chunkS)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		start := time.Now()
		err = cmd.Run()
		secs := time.Since(start).Seconds()
		os.RemoveAll(cacheDir)
		check(err)
		hit := false
		for _, r := range hub.Requests() {
			hit = hit || r.Fault == "trickle"
		}
		if !hit {
			check(fmt.Errorf("the slow connection was never used"))
		}
		ref := results[len(results)-1]
		detect := (hfhub.HedgeOptions{}).Defaults()
		limit := 1.3*ref.secs + (detect.MinWait + detect.Interval).Seconds()
		verdict := "meets"
		if secs > limit {
			verdict = "ABOVE"
		}
		fmt.Printf("hedging: %d connections, one at %s/s: %.2fs vs %.2fs without the fault: %.2fx (goal <= 1.3x + %.2fs detection = %.2fs: %s)\n",
			n, human(slow), secs, ref.secs, secs/ref.secs, (detect.MinWait + detect.Interval).Seconds(), limit, verdict)
		hub.ClearFaults()
	}
	base := results[0]
	maxRSS := 0.0
	for _, r := range results {
		maxRSS = max(maxRSS, r.rssMiB)
	}
	for _, r := range results[1:] {
		ratio := base.secs / r.secs
		verdict := "meets"
		if r.n >= 8 && ratio < 6 {
			verdict = "BELOW"
		}
		fmt.Printf("ratio %d vs %d connection(s): %.2fx (goal for 8: >= 6x: %s)\n", r.n, base.n, ratio, verdict)
	}
	verdict := "meets"
	if maxRSS >= 64 {
		verdict = "ABOVE"
	}
	fmt.Printf("peak RSS of the downloader: %.1f MiB (goal < 64 MiB: %s)\n", maxRSS, verdict)
}

func child(endpoint, cache string, n int, chunk int64) int {
	c, err := hfhub.NewClient(hfhub.Options{Endpoint: endpoint, Anonymous: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	res, err := c.Download(context.Background(), hfhub.DownloadRequest{Repo: "bench/big", CacheDir: cache, Connections: n, ChunkSize: chunk})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if len(res.Files) != 1 || res.Files[0].Status != hfhub.StatusDownloaded {
		fmt.Fprintf(os.Stderr, "unexpected result %+v\n", res.Files)
		return 1
	}
	if _, err := os.Stat(filepath.Join(res.SnapshotDir, "model.safetensors")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			if err != nil || v <= 0 {
				return 0, fmt.Errorf("bad size %q", s)
			}
			return int64(v * float64(u.mult)), nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return v, nil
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/download:", err)
		os.Exit(1)
	}
}
