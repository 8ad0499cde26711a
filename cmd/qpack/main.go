// Command qpack downloads MoE checkpoints from the Hugging Face Hub, repacks
// their routed experts into .qpack containers, verifies them and runs them.
package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"
)

// version is the tool version recorded in manifests; overridden with -ldflags.
var version = "0.1.0-dev"

// commands is filled by the init functions of the files in this package, one
// file per command, so commands can be added without touching this file.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

func init() {
	// Help shows each default once: a flag whose usage already says its
	// default does not get urfave/cli's "(default: …)" too, and a bool
	// flag's "(default: false)" is left out.
	plain := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string {
		s := plain(f)
		du, ok := f.(cli.DocGenerationFlag)
		if !ok || du.GetUsage() == "" {
			return s
		}
		usage := du.GetUsage()
		i := strings.LastIndex(s, usage)
		if i < 0 || !strings.HasPrefix(s[i+len(usage):], " (default: ") {
			return s // urfave/cli added no default
		}
		if _, isBool := f.(*cli.BoolFlag); isBool || strings.Contains(usage, "(default") {
			return s[:i+len(usage)]
		}
		return s
	}
}

func newApp() *cli.App {
	setupCommands.Do(func() {
		sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
		for _, c := range commands {
			c.OnUsageError = onUsageError
			wrapAction(c)
		}
	})
	return &cli.App{
		Name:                 "qpack",
		Usage:                "run huge Mixture-of-Experts models by streaming their experts from SSD",
		Version:              version,
		Commands:             commands,
		EnableBashCompletion: true,
		// A repeatable flag takes each value whole: --fault specs are
		// comma-separated keys, --stop "a,b" is one stop string and
		// --include "x,y.json" one glob.
		DisableSliceFlagSeparator: true,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "verbose", Usage: "debug logging on stderr (accepted anywhere on the line)"},
		},
		Before: func(c *cli.Context) error {
			level := slog.LevelInfo
			if c.Bool("verbose") {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level})))
			return nil
		},
		OnUsageError:   onUsageError,
		ExitErrHandler: func(*cli.Context, error) {}, // errors are reported by main
	}
}

// setupCommands applies the conventions to the registered commands once
// (newApp is called once per test too).
var setupCommands sync.Once

// wrapAction makes an error of an interrupted command an interruptedError
// (exit 130, one line).
func wrapAction(c *cli.Command) {
	if c.Action == nil {
		return
	}
	act := c.Action
	c.Action = func(cc *cli.Context) error {
		err := act(cc)
		// A usage error stays one even if a signal came meanwhile, and a
		// command that already said how it was interrupted keeps its line.
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitInterrupt {
			return err
		}
		if err != nil && cc.Context.Err() != nil && (errors.Is(err, context.Canceled) || exitCode(err) != exitUsage) {
			return &interruptedError{err: err, resumable: resumable[c.Name]}
		}
		return err
	}
}

// run runs the command line args (args[0] is the program name) and returns
// the exit status; errors go to stderr as one "qpack: …" line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp()
	app.Writer, app.ErrWriter = stdout, stderr
	args, err := normalizeArgs(app, args)
	if err == nil {
		err = app.RunContext(ctx, args)
	}
	return exitStatus(stderr, err)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal cancels the work; a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
