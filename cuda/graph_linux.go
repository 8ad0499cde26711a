//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	goruntime "runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// CUDA graphs (stream capture): optional driver symbols, looked up after
// the driver opened; a driver without them runs without graphs.
var graphSyms = []string{"cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
	"cuGraphExecUpdate_v2", "cuGraphLaunch", "cuGraphDestroy", "cuGraphExecDestroy", "cuGraphGetNodes"}

const (
	captureModeRelaxed     = 2   // CU_STREAM_CAPTURE_MODE_RELAXED
	errGraphUpdateFailure  = 910 // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
	errStreamCaptureUnsupp = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
)

// graphs looks the graph symbols up once; false when the driver lacks one.
func (g *gpu) graphs() bool {
	if g.graphState != 0 {
		return g.graphState > 0
	}
	g.graphState = 1
	for _, s := range graphSyms {
		p, err := purego.Dlsym(g.drv.h, s)
		if err != nil || p == 0 {
			g.graphState = -1
			return false
		}
		g.drv.fn[s] = p
	}
	return true
}

func (g *gpu) beginCapture() error {
	if !g.graphs() {
		return errNoGraphs
	}
	return g.do(func() error { return g.call("cuStreamBeginCapture_v2", g.stream, captureModeRelaxed) })
}

func (g *gpu) endCapture() (uintptr, error) {
	var graph uintptr
	err := g.do(func() error {
		g.out[0] = 0
		if err := g.call("cuStreamEndCapture", g.stream, g.outp(0)); err != nil {
			return err
		}
		graph = uintptr(g.out[0])
		return nil
	})
	return graph, err
}

func (g *gpu) instantiate(graph uintptr) (uintptr, error) {
	var exec uintptr
	err := g.do(func() error {
		g.out[0] = 0
		if err := g.call("cuGraphInstantiateWithFlags", g.outp(0), graph, 0); err != nil {
			return err
		}
		exec = uintptr(g.out[0])
		return nil
	})
	return exec, err
}

// execUpdate updates exec to graph's parameters; false (no error) when
// the topologies differ.
func (g *gpu) execUpdate(exec, graph uintptr) (bool, error) {
	info := new([3]uint64) // CUgraphExecUpdateResultInfo, on the heap (a stack may move)
	var pin goruntime.Pinner
	pin.Pin(info)
	defer pin.Unpin()
	ok := true
	err := g.do(func() error {
		err := g.call("cuGraphExecUpdate_v2", exec, graph, uintptr(unsafe.Pointer(info)))
		var e *Error
		if errors.As(err, &e) && e.Code == errGraphUpdateFailure {
			ok = false
			return nil
		}
		return err
	})
	return ok && err == nil, err
}

func (g *gpu) graphLaunch(exec uintptr) error {
	return g.do(func() error { return g.call("cuGraphLaunch", exec, g.stream) })
}

func (g *gpu) graphNodes(graph uintptr) (int, error) {
	var n int
	err := g.do(func() error {
		g.out[0] = 0
		if err := g.call("cuGraphGetNodes", graph, 0, g.outp(0)); err != nil {
			return err
		}
		n = int(g.out[0])
		return nil
	})
	return n, err
}

func (g *gpu) destroyGraph(graph uintptr) error {
	return g.do(func() error { return g.call("cuGraphDestroy", graph) })
}

func (g *gpu) destroyExec(exec uintptr) error {
	return g.do(func() error { return g.call("cuGraphExecDestroy", exec) })
}
