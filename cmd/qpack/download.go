package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/internal/regfile"
)

func init() {
	register(&cli.Command{
		Name:      "download",
		Usage:     "download a Hub repository into the Hugging Face cache (or a plain directory), verifying every file",
		ArgsUsage: "REPO",
		Description: "Files go into the official cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)\n" +
			"with its exact layout, so Python tools see them; or, with --local-dir, into a plain directory.\n" +
			"Large files are fetched as parallel ranges; an interrupted download resumes where it stopped.\n" +
			"Every file is hashed (sha256 for LFS files, git blob sha1 otherwise) before it is put in place.\n" +
			"--include/--exclude are shell-style globs as in `hf download`: '*' also matches '/', and 'dir/'\n" +
			"means everything under dir. The token comes from --token, HF_TOKEN, HUGGING_FACE_HUB_TOKEN or\n" +
			"$HF_HOME/token (prefer the environment: a flag is visible to other users in the process list).\n" +
			"Prints the snapshot (or local) directory on stdout; --json prints a summary instead.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "revision", Value: "main", Usage: "branch, tag or commit"},
			&cli.StringSliceFlag{Name: "include", Usage: "only files matching this glob (repeatable)"},
			&cli.StringSliceFlag{Name: "exclude", Usage: "skip files matching this glob (repeatable)"},
			&cli.StringFlag{Name: "local-dir", Usage: "write plain files here instead of the cache"},
			&cli.StringFlag{Name: "cache-dir", Usage: "cache root (default: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)"},
			&cli.IntFlag{Name: "connections", Value: 8, Usage: "concurrent HTTP range requests"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be downloaded; write nothing"},
			&cli.BoolFlag{Name: "offline", Usage: "use the cache only, no network (also HF_HUB_OFFLINE=1)"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON summary (files, sizes, hashes, paths, snapshot dir)"},
			&cli.StringFlag{Name: "token", Usage: "Hub token (default: HF_TOKEN, HUGGING_FACE_HUB_TOKEN, $HF_HOME/token)"},
		},
		Action: runDownload,
	})
}

func runDownload(cc *cli.Context) error {
	c, err := parseLateFlags(cc)
	if err != nil {
		return err
	}
	if len(c.Args()) != 1 {
		return withCode(2, fmt.Errorf("download: give exactly one REPO (like Qwen/Qwen3-Next-80B-A3B-Instruct)"))
	}
	repo := c.Args()[0]
	if err := hfhub.ValidateRepoID(repo); err != nil {
		return withCode(2, err)
	}
	// An empty --local-dir (say, an unset shell variable) would silently
	// download into the cache instead of the directory meant.
	// (An empty --cache-dir means the default cache, as in repack and
	// verify-install.)
	if c.isSet("local-dir") && c.String("local-dir") == "" {
		return withCode(2, errors.New("download: --local-dir is empty"))
	}
	if d := c.String("local-dir"); d != "" {
		if err := checkLocalDir(d); err != nil {
			return withCode(2, fmt.Errorf("download: --local-dir %s: %w", d, err))
		}
	}
	if n := c.Int("connections"); n < 1 || n > 256 {
		return withCode(2, fmt.Errorf("download: --connections must be between 1 and 256, not %d", n))
	}
	client, err := hfhub.NewClient(hfhub.Options{Token: c.String("token"), UserAgent: "qpack/" + version, Logger: slog.Default()})
	if err != nil {
		return withCode(2, err)
	}
	req := hfhub.DownloadRequest{
		Repo: repo, Revision: c.String("revision"),
		Include: c.StringSlice("include"), Exclude: c.StringSlice("exclude"),
		CacheDir: c.String("cache-dir"), LocalDir: c.String("local-dir"),
		Connections: c.Int("connections"), DryRun: c.Bool("dry-run"), Offline: c.Bool("offline"),
	}
	var bar *termProgress
	if !req.DryRun && term.IsTerminal(int(os.Stderr.Fd())) {
		bar = newTermProgress(os.Stderr)
		req.Progress = bar
	}
	start := time.Now()
	res, err := client.Download(cc.Context, req)
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		if res != nil && c.Bool("json") {
			writeDownloadJSON(cc.App.Writer, res, start, err)
		}
		return err // an interrupt becomes exit 130 with the resume hint (main.go)
	}
	if c.Bool("json") {
		return writeDownloadJSON(cc.App.Writer, res, start, nil)
	}
	if req.DryRun {
		tw := tabwriter.NewWriter(cc.App.Writer, 0, 4, 2, ' ', 0)
		var todo int64
		for _, f := range res.Files {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Status, sizeIEC(f.Size), f.Path)
			if f.Status == hfhub.StatusPlanned {
				todo += f.Size
			}
		}
		tw.Flush()
		fmt.Fprintf(cc.App.Writer, "%d files, %s at commit %s; %s to download into %s\n",
			len(res.Files), sizeIEC(res.TotalBytes), res.Commit, sizeIEC(todo), res.Dir())
		return nil
	}
	fmt.Fprintln(cc.App.Writer, res.Dir())
	return nil
}

// downloadJSON is the --json summary.
type downloadJSON struct {
	*hfhub.DownloadResult
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	Error          string  `json:"error,omitempty"`
}

func writeDownloadJSON(w io.Writer, res *hfhub.DownloadResult, start time.Time, err error) error {
	out := downloadJSON{DownloadResult: res, ElapsedSeconds: time.Since(start).Seconds()}
	if err != nil {
		out.Error = err.Error()
	}
	return writeJSON(w, out)
}

// termProgress shows a download on a terminal: one line with the bytes
// done of the total, one percentage, the rate, the time left and the file
// being fetched; a line per finished file; and a closing total line.
type termProgress struct {
	w       io.Writer
	mu      sync.Mutex
	bar     *termBar
	files   int
	done    int
	failed  int
	bytes   int64               // what the plan fetches
	fetched int64               // of it, bytes fetched by this run
	cur     map[string][2]int64 // path → fetched, size
	started map[string]time.Time
}

func newTermProgress(w io.Writer) *termProgress {
	return &termProgress{w: w, cur: map[string][2]int64{}, started: map[string]time.Time{}}
}

func (p *termProgress) Plan(files int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files, p.bytes = files, bytes
	p.bar = newTermBar(p.w, fmt.Sprintf("[0/%d]", files), bytes)
}

func (p *termProgress) FileStart(path string, size, already int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur[path] = [2]int64{already, size}
	p.started[path] = time.Now()
	if p.bar != nil && already > 0 {
		p.bar.resumed(already) // done, but not part of the rate
	}
	p.describe()
}

func (p *termProgress) Add(path string, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cur[path]
	c[0] += n
	p.cur[path] = c
	p.fetched += n
	if p.bar != nil {
		p.bar.add(n)
	}
}

func (p *termProgress) FileDone(path string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cur[path]
	el := time.Since(p.started[path])
	delete(p.cur, path)
	p.done++
	if p.bar != nil {
		p.bar.clear()
	}
	if err != nil {
		p.failed++
		fmt.Fprintf(p.w, "✗ %s: %v\n", path, err)
	} else {
		rate := ""
		if s := el.Seconds(); s > 0 {
			rate = fmt.Sprintf(", %s/s", sizeIEC(int64(float64(c[0])/s)))
		}
		fmt.Fprintf(p.w, "✓ %s (%s%s)\n", path, sizeIEC(c[1]), rate)
	}
	p.describe()
}

// describe labels the bar with the file count and the file in flight
// (the first by name); the percentage on the line is the total's.
func (p *termProgress) describe() {
	if p.bar == nil {
		return
	}
	label := fmt.Sprintf("[%d/%d]", p.done, p.files)
	var name string
	for k := range p.cur {
		if name == "" || k < name {
			name = k
		}
	}
	if name != "" {
		if len(name) > 40 {
			name = "…" + name[len(name)-39:]
		}
		label += " " + name
	}
	p.bar.setLabel(label)
}

// finish replaces the bar with the closing total line.
func (p *termProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil {
		return
	}
	el := p.bar.elapsed()
	rate := ""
	if s := el.Seconds(); s > 0 && p.fetched > 0 {
		rate = fmt.Sprintf(", %s/s", sizeIEC(int64(float64(p.fetched)/s)))
	}
	summary := fmt.Sprintf("%d of %d files, %s fetched in %s%s", p.done-p.failed, p.files, sizeIEC(p.fetched), shortDuration(el), rate)
	if p.failed > 0 {
		summary += fmt.Sprintf("; %d failed", p.failed)
	}
	p.bar.finish(summary)
}

// checkLocalDir accepts a --local-dir that is a directory (or a link to
// one) or does not exist yet; a file, a FIFO or a dangling link there is
// bad input, told before any request.
func checkLocalDir(d string) error {
	st, err := os.Stat(d)
	if err == nil {
		if !st.IsDir() {
			kind := "a regular file"
			if !st.Mode().IsRegular() {
				kind = regfile.Describe(st.Mode())
			}
			return fmt.Errorf("exists and is %s, not a directory", kind)
		}
		return nil
	}
	if lst, lerr := os.Lstat(d); lerr == nil && lst.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("is a link to nothing (%v)", err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
