package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/verify"
)

func init() {
	register(&cli.Command{
		Name:  "verify-install",
		Usage: "check a .qpack container: every file and expert blob against its BLAKE3 digest, and with --deep every byte against the source checkpoint",
		Description: `Exit status: 0 the container is intact (a receipt, verified-install.json, is written
into it), 1 the container is damaged (each bad file is named, and for layer files the
layer and expert; --deep also names the section or dense tensor), 2 the input is
unusable (not a container, unreadable, an unsupported version, a structure that breaks
the format, or a source that cannot serve as a reference).`,
		ArgsUsage: "CONTAINER.qpack",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON on stdout"},
			&cli.BoolFlag{Name: "full", Usage: "also check the whole-file digests of layer files (hashes every layer byte twice; tells a damaged manifest entry from damaged data)"},
			&cli.BoolFlag{Name: "deep", Usage: "also compare every dense tensor and expert section with the source checkpoint"},
			&cli.StringFlag{Name: "source", Usage: "source for --deep: a checkpoint directory or a Hub repo `ID` (default: the repo the manifest records)"},
			&cli.StringFlag{Name: "revision", Usage: "revision of a Hub source (default: the commit the manifest records, else main)"},
			&cli.IntFlag{Name: "sample", Usage: "with --deep, compare only `N` random experts per layer (quick; shard hashes are then not checked)"},
			&cli.Int64Flag{Name: "seed", Usage: "seed for --sample (default: from the clock; the report records it)"},
			&cli.IntFlag{Name: "workers", Usage: "files hashed at once (default: the number of CPUs)"},
			&cli.IntFlag{Name: "connections", Value: 8, Usage: "concurrent range requests per shard for a Hub source"},
			&cli.StringFlag{Name: "token", Usage: "Hugging Face token (default: HF_TOKEN or the token file)"},
			&cli.BoolFlag{Name: "offline", Usage: "read a Hub source from the HF cache only, no network (also HF_HUB_OFFLINE=1)"},
			&cli.StringFlag{Name: "cache-dir", Usage: "HF cache root read for a Hub source (default: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)"},
			&cli.BoolFlag{Name: "no-cache", Usage: "read every file of a Hub source from the Hub even when the HF cache has it"},
			&cli.StringFlag{Name: "receipt", Usage: "write the receipt to `PATH` (default: CONTAINER/verified-install.json)"},
			&cli.BoolFlag{Name: "no-receipt", Usage: "do not write a receipt"},
		},
		Action: verifyInstall,
	})
}

// verifyOutput is the JSON printed by --json.
type verifyOutput struct {
	*verify.Report
	Receipt string `json:"receipt,omitempty"`
}

func verifyInstall(c *cli.Context) error {
	lf, err := parseLateFlags(c)
	if err != nil {
		return err
	}
	if len(lf.Args()) != 1 {
		return withCode(2, errors.New("verify-install: give exactly one container directory"))
	}
	dir := lf.Args()[0]
	asJSON := lf.Bool("json")
	if p := lf.String("receipt"); p != "" && !lf.Bool("no-receipt") {
		if err := verify.CheckReceiptTarget(p); err != nil {
			return withCode(2, fmt.Errorf("verify-install: --receipt: %w", err))
		}
	}
	o := verify.Options{Full: lf.Bool("full"), Workers: lf.Int("workers"), Logger: slog.Default()}

	var bar *phaseBar
	if term.IsTerminal(int(os.Stderr.Fd())) {
		bar = &phaseBar{w: os.Stderr}
		o.Progress = bar.update
	}

	if lf.Bool("deep") || lf.String("source") != "" {
		// A model the runner cannot run is refused from its config.json
		// before the source is opened (no request for a shard byte).
		if err := verify.CheckConfig(dir); err != nil {
			return withCode(2, fmt.Errorf("verify-install: %w", err))
		}
		src, err := openVerifySource(c, lf, dir)
		if err != nil {
			return withCode(2, fmt.Errorf("verify-install --deep: %w", err))
		}
		defer src.Close()
		seed := uint64(lf.Int64("seed"))
		if seed == 0 {
			seed = uint64(time.Now().UnixNano())
		}
		o.Deep = &verify.DeepOptions{Source: src, Sample: lf.Int("sample"), Seed: seed, Prefetch: lf.Int("connections")}
		if !src.Remote {
			o.Deep.Prefetch = 0
		}
	} else if lf.Int("sample") > 0 {
		return withCode(2, errors.New("verify-install: --sample needs --deep"))
	}

	rep, _ := verify.Verify(c.Context, dir, o)
	bar.finish()
	if err := c.Context.Err(); err != nil {
		return err // interrupted: no report (main says how to resume)
	}

	out := verifyOutput{Report: rep}
	var receiptErr error
	if rep.Status == verify.StatusOK && !lf.Bool("no-receipt") {
		path := lf.String("receipt")
		if path == "" {
			path = filepath.Join(dir, verify.ReceiptName)
		}
		rc, err := verify.NewReceipt(rep, "qpack "+version, time.Now())
		if err == nil {
			err = verify.WriteReceipt(path, rc)
		}
		if err != nil {
			receiptErr = fmt.Errorf("verified, but the receipt could not be written: %w", err)
		} else {
			out.Receipt = path
		}
	}

	w := c.App.Writer
	if asJSON {
		if err := writeJSON(w, out); err != nil {
			return err
		}
	} else {
		printVerify(w, &out)
	}
	// The report just printed names the status and every problem: the
	// errors below set the exit code without being printed again.
	switch {
	case rep.Status == verify.StatusDamaged:
		return silentCode(1, fmt.Errorf("%s is damaged: %d problem(s)", dir, len(rep.ContainerProblems())+rep.ProblemsOmitted))
	case rep.Status == verify.StatusUnusable:
		msg := rep.Error
		if msg == "" && len(rep.Problems) > 0 {
			msg = rep.Problems[0].String()
		}
		return silentCode(2, fmt.Errorf("cannot verify %s: %s", dir, msg))
	case receiptErr != nil:
		return withCode(2, receiptErr)
	}
	return nil
}

// openVerifySource opens the --deep source: --source as a directory if one
// exists there, else as a Hub repository; without --source, the Hub
// repository and commit the manifest records.
func openVerifySource(c *cli.Context, lf *lateFlags, dir string) (*verify.Source, error) {
	source, revision := lf.String("source"), lf.String("revision")
	var recorded *qpack.Manifest
	if data, err := readSmall(filepath.Join(dir, qpack.ManifestName), qpack.MaxManifestSize); err == nil {
		recorded, _ = qpack.ParseManifest(data)
	}
	if source != "" {
		if st, err := os.Stat(source); err == nil && st.IsDir() {
			if revision != "" {
				return nil, errors.New("--revision applies to a Hub source, not a directory")
			}
			if lf.Bool("offline") || lf.String("cache-dir") != "" || lf.Bool("no-cache") {
				return nil, errors.New("--offline, --cache-dir and --no-cache apply to a Hub source, not a directory")
			}
			return verify.OpenDirSource(source)
		}
		if err := hfhub.ValidateRepoID(source); err != nil {
			return nil, fmt.Errorf("--source %q is neither a directory nor a Hub repository id: %w", source, err)
		}
		if revision == "" && recorded != nil && recorded.Ext != nil && recorded.Ext.Source.Repo == source {
			_, revision, _ = verify.DefaultSource(recorded)
		}
	} else {
		if recorded == nil {
			return nil, errors.New("the container's manifest cannot be read, so it names no source: give --source")
		}
		repo, rev, err := verify.DefaultSource(recorded)
		if err != nil {
			return nil, err
		}
		source = repo
		if revision == "" {
			revision = rev
		}
	}
	cs, err := checkpoint.OpenHub(c.Context, checkpoint.HubOptions{
		Repo: source, Revision: revision,
		ClientOptions: hfhub.Options{Token: lf.String("token"), UserAgent: "qpack/" + version, Logger: slog.Default()},
		Reader:        hfhub.ReaderOptions{Connections: lf.Int("connections")},
		CacheDir:      lf.String("cache-dir"), NoCache: lf.Bool("no-cache"), Offline: lf.Bool("offline"), Logger: slog.Default(),
	})
	if err != nil {
		return nil, err
	}
	src, err := verify.FromCheckpoint(c.Context, cs)
	if err != nil {
		cs.Close()
		return nil, err
	}
	return src, nil
}

func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, err
}

func printVerify(w io.Writer, out *verifyOutput) {
	r := out.Report
	var bytes int64
	for _, f := range r.Files {
		bytes += f.Size
	}
	if r.Error != "" {
		fmt.Fprintf(w, "%s: %s: %s\n", r.Container, r.Status, r.Error)
	} else {
		rate := ""
		if r.Seconds > 0 && r.BytesHashed > 0 {
			rate = fmt.Sprintf(", %s/s", shortBytes(int64(float64(r.BytesHashed)/r.Seconds)))
		}
		fmt.Fprintf(w, "%s: %s (%d files, %s, %.1f s%s)\n", r.Container, r.Status, len(r.Files), shortBytes(bytes), r.Seconds, rate)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
	if r.ProblemsOmitted > 0 {
		fmt.Fprintf(w, "  … and %d more problems\n", r.ProblemsOmitted)
	}
	if d := r.Deep; d != nil {
		fmt.Fprintf(w, "deep check against %s: %d dense tensors, %d expert sections and %d side files compared (%s), %s read from the source in %.1f s\n",
			d.Source, d.DenseTensors, d.ExpertSlices, d.SideFiles, shortBytes(d.BytesCompared), shortBytes(d.SourceBytesRead), d.Seconds)
		for _, s := range d.Shards {
			fmt.Fprintf(w, "  shard %s: %s\n", s.Name, s.Status)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, x := range r.ExtraFiles {
		fmt.Fprintf(w, "note: %s is not listed in the manifest (ignored)\n", x)
	}
	if out.Receipt != "" {
		fmt.Fprintf(w, "receipt: %s\n", out.Receipt)
	}
}

// shortBytes renders n with a binary unit and one decimal.
func shortBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, units := float64(n), "KMGTPE"
	i := -1
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[i])
}

// phaseBar shows one progress line per phase on a terminal (termBar).
type phaseBar struct {
	w     io.Writer
	phase string
	bar   *termBar
}

func (p *phaseBar) update(pr verify.Progress) {
	if p.phase != pr.Phase || p.bar == nil {
		p.finish()
		p.phase = pr.Phase
		desc := map[string]string{"hash": "hashing", "deep": "comparing with the source"}[pr.Phase]
		p.bar = newTermBar(p.w, desc, pr.Total)
	}
	p.bar.set(pr.Done)
}

func (p *phaseBar) finish() {
	if p == nil || p.bar == nil {
		return
	}
	p.bar.finish("")
	p.bar = nil
}
