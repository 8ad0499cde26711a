// Command qpack downloads MoE checkpoints from the Hugging Face Hub, repacks
// their routed experts into .qpack containers, verifies them and runs them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
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
// a bad container and 2 for unusable input). A silent one is not printed
// by main: the command has already shown it (in a report on stdout).
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// silentCode is withCode for an error the command has already reported.
func silentCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err, silent: true}
}

// exitStatus prints err on w (unless it is silent) and returns the exit
// code it asks for: 0 for nil, an exitError's code, else 1.
func exitStatus(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		fmt.Fprintln(w, "qpack:", err)
		return 1
	}
	if !ee.silent {
		fmt.Fprintln(w, "qpack:", err)
	}
	return ee.code
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
	app := newApp()
	err := app.RunContext(ctx, interspersedArgs(app, os.Args))
	stop()
	if code := exitStatus(os.Stderr, err); code != 0 {
		os.Exit(code)
	}
}

// interspersedArgs moves a command's flags in front of its positional
// arguments, so `qpack inspect X.qpack --json` works like
// `qpack inspect --json X.qpack` (urfave/cli v2 stops parsing flags at the
// first positional argument). Only flags the command defines are moved; a
// flag that takes a value takes the next argument with it unless written
// as --name=value. "--" ends flag parsing as usual.
func interspersedArgs(app *cli.App, args []string) []string {
	if len(args) < 3 {
		return args
	}
	// Global flags come before the command name.
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		i++
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, pos []string
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			pos = append(pos, rest[j:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		hasValue := strings.Contains(name, "=")
		name, _, _ = strings.Cut(name, "=")
		tv, known := takesValue[name]
		if !known {
			pos = append(pos, a) // let the command report it
			continue
		}
		flags = append(flags, a)
		if tv && !hasValue && j+1 < len(rest) {
			flags = append(flags, rest[j+1])
			j++
		}
	}
	out := append([]string{}, args[:i+1]...)
	out = append(out, flags...)
	return append(out, pos...)
}
