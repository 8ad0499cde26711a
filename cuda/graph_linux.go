//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// CUDA graphs (stream capture): optional driver symbols, looked up after
// the driver opened; a driver without them runs without graphs.
var graphSyms = []string{"cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
	"cuGraphExecUpdate_v2", "cuGraphLaunch", "cuGraphDestroy", "cuGraphExecDestroy", "cuGraphGetNodes",
	"cuGraphExecKernelNodeSetParams_v2"}

// One of these gives the node a capture added last: v3 (CUDA 12.3 on)
// has an edge-data out-parameter more than v2.
var captureInfoSyms = []string{"cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2"}

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
	for _, s := range captureInfoSyms {
		if p, err := purego.Dlsym(g.drv.h, s); err == nil && p != 0 {
			g.drv.fn[s] = p
			g.captureInfo = s
			break
		}
	}
	if g.captureInfo == "" {
		g.graphState = -1
		return false
	}
	return true
}

// lastNode implements graphDevice: the capture's current dependency (the
// node its last call added; the capture is a chain).
func (g *gpu) lastNode() (uintptr, error) {
	var node uintptr
	// A query, not an operation on the stream: the next launch may still
	// depend programmatically on the kernel before.
	defer func(k bool) { g.afterKernel = k }(g.afterKernel)
	err := g.do(func() error {
		clear(g.out[:])
		var err error
		if g.captureInfo == "cuStreamGetCaptureInfo_v3" {
			// (stream, status*, id*, graph*, deps**, edgeData**, numDeps*);
			// the edge data asked for too (after a dependent launch the
			// edges need not be the default ones, and a query without
			// them may then fail as lossy).
			err = g.call(g.captureInfo, g.stream, g.outp(0), g.outp(1), 0, g.outp(2), g.outp(4), g.outp(3))
		} else {
			err = g.call(g.captureInfo, g.stream, g.outp(0), g.outp(1), 0, g.outp(2), g.outp(3))
		}
		if err != nil {
			return err
		}
		if status := uint32(g.out[0]); status != 1 { // CU_STREAM_CAPTURE_STATUS_ACTIVE
			return fmt.Errorf("cuda: stream capture status %d, not active", status)
		}
		if g.out[3] != 1 || g.out[2] == 0 {
			return fmt.Errorf("cuda: the capture has %d dependencies, not one", g.out[3])
		}
		node = *(*uintptr)(cptr(uintptr(g.out[2])))
		return nil
	})
	return node, err
}

// kernelNodeParams is CUDA_KERNEL_NODE_PARAMS_v2 (72 bytes; kern and ctx
// zero: func is used, in the current context).
type kernelNodeParams struct {
	fn           uintptr
	grid, block  [3]uint32
	sharedMem    uint32
	_            uint32
	kernelParams uintptr
	extra        uintptr
	kern, ctx    uintptr
}

// setKernelParams implements graphDevice.
func (g *gpu) setKernelParams(exec, node, fn uintptr, grid, block [3]uint32, params []byte) error {
	var pin goruntime.Pinner
	defer pin.Unpin()
	kp := &kernelNodeParams{fn: fn, grid: grid, block: block, kernelParams: kernelArgs(&pin, params)}
	pin.Pin(kp)
	defer func(k bool) { g.afterKernel = k }(g.afterKernel) // not an operation on the stream
	return g.do(func() error {
		return g.call("cuGraphExecKernelNodeSetParams_v2", exec, node, uintptr(unsafe.Pointer(kp)))
	})
}

func (g *gpu) beginCapture() error {
	if !g.graphs() {
		return errNoGraphs
	}
	g.queueOn(computeStream)
	err := g.do(func() error { return g.call("cuStreamBeginCapture_v2", g.stream, captureModeRelaxed) })
	g.capturing = err == nil
	return err
}

func (g *gpu) endCapture() (uintptr, error) {
	g.capturing = false
	return g.callOut("cuStreamEndCapture", g.stream, g.outp(0))
}

func (g *gpu) instantiate(graph uintptr) (uintptr, error) {
	return g.callOut("cuGraphInstantiateWithFlags", g.outp(0), graph, 0)
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
	g.queueOn(computeStream)
	return g.do(func() error { return g.call("cuGraphLaunch", exec, g.stream) })
}

func (g *gpu) graphNodes(graph uintptr) (int, error) {
	n, err := g.callOut("cuGraphGetNodes", graph, 0, g.outp(0))
	return int(n), err
}

func (g *gpu) destroyGraph(graph uintptr) error {
	return g.do(func() error { return g.call("cuGraphDestroy", graph) })
}

func (g *gpu) destroyExec(exec uintptr) error {
	return g.do(func() error { return g.call("cuGraphExecDestroy", exec) })
}

// callOut calls a driver function whose out-parameter (one of args) is
// g.outp(0), and returns what it wrote there.
func (g *gpu) callOut(name string, args ...uintptr) (uintptr, error) {
	var v uintptr
	err := g.do(func() error {
		g.out[0] = 0
		if err := g.call(name, args...); err != nil {
			return err
		}
		v = uintptr(g.out[0])
		return nil
	})
	return v, err
}
