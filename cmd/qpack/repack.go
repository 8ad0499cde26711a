package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/repack"
)

func init() {
	register(&cli.Command{
		Name:  "repack",
		Usage: "stream an MLX checkpoint from the Hub or a directory into a .qpack container (resumable)",
		Description: `Plans the container from config.json and the shard headers, then streams every shard
with range reads straight into the container's files: the checkpoint is never stored. Each shard is
hashed in order and checked against the Hub's sha256 (a local shard's sha256 is recorded). With
--from-hf, files already in the HF cache (written by qpack or the official client) are read from it
and hash-checked; only the rest is fetched, and --offline (or HF_HUB_OFFLINE=1) reads the cache
alone. Killed at any point, the same command resumes; a Hub repo that already holds a .qpack is
downloaded instead.`,
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from-hf", Usage: "Hub repo id `ORG/NAME` of an MLX checkpoint (or of a built .qpack)"},
			&cli.StringFlag{Name: "revision", Usage: "branch, tag or commit of --from-hf", Value: "main"},
			&cli.StringFlag{Name: "from-dir", Usage: "local MLX checkpoint `DIR`"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the container to create, `X.qpack` (required)"},
			&cli.IntFlag{Name: "connections", Usage: "concurrent range reads (default 8 for the Hub, 2 for a directory)"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace an existing container at --output"},
			&cli.BoolFlag{Name: "discard-partial", Usage: "throw away an interrupted repack of --output and start over"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON summary on stdout"},
			&cli.StringFlag{Name: "token", Usage: "Hub access token (default: HF_TOKEN, then the token file)", EnvVars: nil},
			&cli.BoolFlag{Name: "offline", Usage: "--from-hf from the HF cache only, no network (also HF_HUB_OFFLINE=1)"},
			&cli.StringFlag{Name: "cache-dir", Usage: "HF cache root read for --from-hf (default: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)"},
			&cli.BoolFlag{Name: "no-cache", Usage: "fetch every --from-hf file from the Hub even when the HF cache has it"},
			&cli.Int64Flag{Name: "range-size", Usage: "bytes per range read", Value: repack.DefaultRangeSize, Hidden: true},
			&cli.IntFlag{Name: "tile-size", Usage: "bytes each connection writes at a time (the most an interrupt loses per connection)", Value: repack.DefaultTileSize, Hidden: true},
			&cli.Int64Flag{Name: "reserve", Usage: "free space to leave on the output's disk, in bytes (default 1 GiB; -1: none)", Hidden: true},
		},
		Action: repackAction,
		// A flag that does not parse is a usage error, exit 2.
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return withCode(2, fmt.Errorf("repack: %w", err)) },
	})
}

func repackAction(c *cli.Context) error {
	if c.NArg() != 0 {
		return withCode(2, fmt.Errorf("repack: unexpected argument %q (use --from-hf or --from-dir, and --output)", c.Args().First()))
	}
	hf, dir := c.String("from-hf"), c.String("from-dir")
	if (hf == "") == (dir == "") {
		return withCode(2, fmt.Errorf("repack: give exactly one of --from-hf REPO and --from-dir DIR"))
	}
	if dir != "" && (c.IsSet("offline") || c.IsSet("cache-dir") || c.IsSet("no-cache")) {
		return withCode(2, fmt.Errorf("repack: --offline, --cache-dir and --no-cache go with --from-hf"))
	}
	if dir != "" && c.IsSet("revision") {
		return withCode(2, fmt.Errorf("repack: --revision goes with --from-hf"))
	}
	if c.Int("connections") < 0 || c.Int("connections") > 64 {
		return withCode(2, fmt.Errorf("repack: --connections must be between 1 and 64"))
	}
	out := c.String("output")
	if !c.IsSet("output") {
		return withCode(2, fmt.Errorf("repack: give --output X.qpack, the container to create"))
	}
	if strings.TrimSpace(out) == "" {
		return withCode(2, fmt.Errorf("repack: --output is empty"))
	}
	if abs, err := filepath.Abs(out); err != nil {
		return withCode(2, fmt.Errorf("repack: --output %s: %w", out, err))
	} else if st, err := os.Stat(filepath.Dir(abs)); err != nil || !st.IsDir() {
		return withCode(2, fmt.Errorf("repack: --output %s: its directory %s does not exist", out, filepath.Dir(abs)))
	}
	if hf != "" {
		if err := hfhub.ValidateRepoID(hf); err != nil {
			return withCode(2, fmt.Errorf("repack: --from-hf: %w", err))
		}
	}
	if dir != "" {
		// An unusable source is the input's fault (exit 2), not a failed
		// repack: plan it before anything is written. Planning reads only
		// config.json and the shard headers.
		if err := checkRepackDir(c.Context, dir); err != nil {
			return withCode(2, fmt.Errorf("repack: %w", err))
		}
	}
	o := repack.Options{
		FromHF: hf, Revision: c.String("revision"), FromDir: dir, Output: out,
		Connections: c.Int("connections"), Overwrite: c.Bool("overwrite"), DiscardPartial: c.Bool("discard-partial"),
		Token: c.String("token"), RangeSize: c.Int64("range-size"), TileSize: c.Int("tile-size"), Reserve: c.Int64("reserve"),
		ToolVersion: version, Logger: slog.Default(),
		Offline: c.Bool("offline"), CacheDir: c.String("cache-dir"), NoCache: c.Bool("no-cache"),
	}
	var bar *repackBar
	if repackIsTerminal(os.Stderr) {
		bar = &repackBar{w: os.Stderr}
		o.OnProgress = bar.update
	}
	res, err := repack.Run(c.Context, o)
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return withCode(repackExitCode(err), err)
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, res)
	}
	printRepackSummary(c.App.Writer, res, hf != "" && (o.Offline || hfhub.EnvOffline()))
	return nil
}

// checkRepackDir opens and plans a local checkpoint: a path that does not
// exist, is not a directory, or holds no usable MLX checkpoint fails here.
// The errors name dir.
func checkRepackDir(ctx context.Context, dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("source directory: %w", err) // the path error names dir
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	ds, err := repack.OpenDir(dir) // its errors name dir or the shard
	if err != nil {
		return err
	}
	defer ds.Close()
	if _, err := repack.PlanSource(ctx, ds); err != nil {
		return fmt.Errorf("%s: not a usable checkpoint: %w", dir, err)
	}
	return nil
}

// repackExitCode is 2 for errors that say the input or the request is
// unusable (an existing output without --overwrite, a Hub repository or
// revision that does not exist or cannot be accessed), 1 for a failure
// during the repack.
func repackExitCode(err error) int {
	for _, e := range []error{repack.ErrExists, repack.ErrUnsafeOutput, hfhub.ErrRepoNotFound, hfhub.ErrRevisionNotFound,
		hfhub.ErrGatedRepo, hfhub.ErrDisabledRepo, hfhub.ErrUnauthorized, hfhub.ErrNotCached, checkpoint.ErrOfflineNoCache,
		modelconfig.ErrConfig} {
		if errors.Is(err, e) {
			return 2
		}
	}
	return 1
}

func printRepackSummary(w io.Writer, r *repack.Result, offline bool) {
	from := r.SourceDir
	if r.Repo != "" {
		from = r.Repo + "@" + repackShortCommit(r.Commit)
	}
	switch {
	case r.AlreadyComplete:
		fmt.Fprintf(w, "%s is already complete (from %s)\n", r.Output, from)
		return
	case r.Mode == "prebuilt":
		fmt.Fprintf(w, "downloaded the prebuilt container %s to %s: %s in %.1fs\n", from, r.Output, sizeIEC(r.OutputBytes), r.Seconds)
		return
	}
	fmt.Fprintf(w, "repacked %s into %s: %s from %s of shards in %.1fs (%s/s)\n",
		from, r.Output, sizeIEC(r.OutputBytes), sizeIEC(r.SourceBytes), r.Seconds, sizeIEC(int64(r.Throughput)))
	if r.Resumed {
		fmt.Fprintf(w, "  resumed: %d of %d ranges were already complete", r.RangesReused, r.Ranges)
		if r.RangesRedone > 0 {
			fmt.Fprintf(w, ", %d damaged ones fetched again", r.RangesRedone)
		}
		fmt.Fprintln(w)
	}
	for _, s := range r.Shards {
		how := "sha256 recorded"
		switch {
		case s.Verified && r.Repo != "" && offline:
			how = "sha256 verified against the cached Hub listing (offline)"
		case s.Verified && r.Repo != "":
			how = "sha256 verified against the Hub"
		case s.Verified:
			how = "sha256 verified against the name of its HF cache blob"
		}
		fmt.Fprintf(w, "  %s  %s  %s (%s)\n", s.SHA256, sizeIEC(s.Size), s.Name, how)
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "  skipped %d tensors (%s):", len(r.Skipped), sizeIEC(r.SkippedBytes))
		for i, s := range r.Skipped {
			if i == 5 {
				fmt.Fprintf(w, " ... and %d more", len(r.Skipped)-5)
				break
			}
			fmt.Fprintf(w, " %s (%s)", s.Name, s.Reason)
		}
		fmt.Fprintln(w)
	}
}

func repackShortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func repackIsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
