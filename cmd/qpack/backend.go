package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/metal"
	"github.com/qpack-go/qpack/runtime"
)

// backendFlag is the --backend flag of the commands that run a model
// (generate, chat, logits).
func backendFlag() cli.Flag {
	return &cli.StringFlag{Name: "backend", Value: "cpu",
		Usage: "compute backend: cpu (pure Go, every platform) or metal (Apple GPU, macOS)"}
}

// selectBackend returns the backend --backend names. A backend that holds a
// device (metal) implements io.Closer: release it with closeBackend when the
// model is closed.
func selectBackend(name string) (runtime.Backend, error) {
	switch name {
	case "", "cpu":
		return runtime.CPU{}, nil
	case "metal":
		b, err := metal.New()
		if err != nil {
			return nil, fmt.Errorf("--backend metal: %w", err)
		}
		slog.Debug("metal backend", "device", b.Name())
		return b, nil
	}
	return nil, fmt.Errorf("--backend %q: want cpu or metal", name)
}

// closeBackend releases what selectBackend opened.
func closeBackend(b runtime.Backend) {
	if c, ok := b.(io.Closer); ok {
		if err := c.Close(); err != nil {
			slog.Warn("closing the backend", "err", err)
		}
	}
}
