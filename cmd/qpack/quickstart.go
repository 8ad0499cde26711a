package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/verify"
)

// bundledVariant is the tiny checkpoint quickstart runs on: 4-bit, group 64,
// two shards, as mlx-community's 4-bit Qwen3-Next checkpoints are laid out.
const bundledVariant = "qwen3_next-q4g64"

func init() {
	register(&cli.Command{
		Name:  "quickstart",
		Usage: "repack, verify, inspect and run the bundled tiny model (no network)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "checkpoint directory to use instead of the bundled tiny model"},
			&cli.StringFlag{Name: "workdir", Usage: "where to write the container (default: a temporary directory, removed afterwards)"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON summary"},
		},
		Action: func(c *cli.Context) error {
			sum, err := quickstart(c.Context, c.App.Writer, c.String("model"), c.String("workdir"), c.Bool("json"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, sum)
			}
			return nil
		},
	})
}

// quickstartSummary is the --json form of a quickstart run.
type quickstartSummary struct {
	Source    string         `json:"source"`
	Container string         `json:"container"`
	Repack    *repack.Result `json:"repack"`
	Inspect   *inspectReport `json:"inspect"`
	Verify    *verify.Report `json:"verify"`
	Steps     []string       `json:"steps"`
	Extra     map[string]any `json:"extra,omitempty"`
}

// quickstartSteps are run after the repack and inspect steps, in order; the
// verify and generate commands add theirs from their own files.
var quickstartSteps []func(ctx context.Context, w io.Writer, container string, sum *quickstartSummary) error

// findBundled returns testdata/tiny/<variant> under the working directory or
// one of its parents (so `go run ./cmd/qpack quickstart` works from anywhere
// in the repository), or "" if there is none.
func findBundled() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		p := filepath.Join(dir, "testdata", "tiny", bundledVariant)
		if st, err := os.Stat(filepath.Join(p, "config.json")); err == nil && !st.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func quickstart(ctx context.Context, w io.Writer, model, workdir string, quiet bool) (*quickstartSummary, error) {
	say := func(format string, a ...any) {
		if !quiet {
			fmt.Fprintf(w, format+"\n", a...)
		}
	}
	if workdir == "" {
		tmp, err := os.MkdirTemp("", "qpack-quickstart-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		workdir = tmp
	} else if err := os.MkdirAll(workdir, 0o755); err != nil {
		return nil, err
	}
	if model == "" {
		model = findBundled()
		if model == "" {
			// Outside the repository: the generator is deterministic and
			// makes the same bytes as the committed copy. It writes into a
			// fresh directory of its own (it clears checkpoint files where
			// it writes), never into a path under --workdir.
			gen, err := os.MkdirTemp("", "qpack-quickstart-model-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(gen)
			model = filepath.Join(gen, bundledVariant)
			for _, v := range tinymodel.Variants() {
				if v.Name == bundledVariant {
					if err := tinymodel.Generate(model, v.Spec); err != nil {
						return nil, fmt.Errorf("generating the tiny model: %w", err)
					}
				}
			}
		}
	}
	sum := &quickstartSummary{Source: model, Container: filepath.Join(workdir, "tiny.qpack")}

	say("== 1. repack %s -> %s", model, sum.Container)
	start := time.Now()
	res, err := repack.Run(ctx, repack.Options{
		FromDir:     model,
		Output:      sum.Container,
		Overwrite:   true,
		ToolVersion: version,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if errors.Is(err, repack.ErrUnsafeOutput) {
		// --workdir holds a tiny.qpack that is not a container qpack wrote.
		return nil, withCode(2, fmt.Errorf("repack: %w", err))
	}
	if err != nil {
		return nil, fmt.Errorf("repack: %w", err)
	}
	sum.Repack = res
	sum.Steps = append(sum.Steps, "repack")
	say("   %d shards (sha256 recorded), %d bytes written in %s; %d tensors skipped",
		len(res.Shards), res.OutputBytes, time.Since(start).Round(time.Millisecond), len(res.Skipped))

	say("== 2. inspect %s", sum.Container)
	rep, err := inspectPath(sum.Container)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	sum.Inspect = rep
	sum.Steps = append(sum.Steps, "inspect")
	if !quiet {
		rep.print(w)
	}

	stepOut := w
	if quiet {
		stepOut = io.Discard // --json: the summary is the only output
	}
	say("== 3. verify-install --deep --source %s", model)
	src, err := verify.OpenDirSource(model)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	vr, err := verify.Verify(ctx, sum.Container, verify.Options{Full: true, Deep: &verify.DeepOptions{Source: src}})
	src.Close()
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if vr.Status != verify.StatusOK {
		return nil, fmt.Errorf("verify: the container just written does not verify: %d problems, first: %+v", len(vr.Problems), vr.Problems[0])
	}
	rc, err := verify.NewReceipt(vr, version, time.Now())
	if err == nil {
		err = verify.WriteReceipt(filepath.Join(sum.Container, verify.ReceiptName), rc)
	}
	if err != nil {
		return nil, fmt.Errorf("verify: receipt: %w", err)
	}
	sum.Verify = vr
	sum.Steps = append(sum.Steps, "verify")
	say("   %d files, %d bytes hashed (BLAKE3), every dense tensor and expert section equal to the source: %s", len(vr.Files), vr.BytesHashed, vr.Status)

	for _, step := range quickstartSteps {
		if err := step(ctx, stepOut, sum.Container, sum); err != nil {
			return nil, err
		}
	}
	say("quickstart: done")
	return sum, nil
}
