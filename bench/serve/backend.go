package main

import (
	"fmt"

	"github.com/qpack-go/qpack/cuda"
	"github.com/qpack-go/qpack/runtime"
)

// openBackend opens the backend -backend names: nil for the CPU (the
// runner's default), or the CUDA backend, whose step is ~0.6 ms at the
// 35B's dims where the CPU's is 15-25 ms, so that what the server adds to
// a decode step (its text's parse, chunk and write) shows. close releases
// it after the runner.
func openBackend(name string) (be runtime.Backend, close func(), err error) {
	switch name {
	case "", "cpu":
		return nil, func() {}, nil
	case "cuda":
		b, err := cuda.New()
		if err != nil {
			return nil, nil, fmt.Errorf("-backend cuda: %w", err)
		}
		return b, func() { b.Close() }, nil
	}
	return nil, nil, fmt.Errorf("-backend %q: want cpu or cuda", name)
}
