// Command qpack downloads MoE checkpoints from the Hugging Face Hub, repacks
// their routed experts into .qpack containers, verifies them and runs them.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version is the tool version recorded in manifests; overridden with -ldflags.
var version = "0.1.0-dev"

// commands is filled by the init functions of the files in this package, one
// file per command, so commands can be added without touching this file.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

// exitError carries a specific process exit code (verify-install uses 1 for
// a bad container and 2 for unusable input).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func newApp() *cli.App {
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	return &cli.App{
		Name:                 "qpack",
		Usage:                "run huge Mixture-of-Experts models by streaming their experts from SSD",
		Version:              version,
		Commands:             commands,
		EnableBashCompletion: true,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "verbose", Usage: "debug logging on stderr"},
		},
		Before: func(c *cli.Context) error {
			level := slog.LevelInfo
			if c.Bool("verbose") {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
			return nil
		},
		ExitErrHandler: func(*cli.Context, error) {}, // errors are reported by main
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "qpack:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}
