package cuda

import "errors"

// grapher is what a device offers for CUDA graphs (graph_linux.go): the
// compute stream's work captured into a graph, instantiated, updated to a
// new capture of the same topology, and launched as one submission.
type grapher interface {
	beginCapture() error
	endCapture() (graph uintptr, err error)
	instantiate(graph uintptr) (exec uintptr, err error)
	execUpdate(exec, graph uintptr) (bool, error)
	graphLaunch(exec uintptr) error
	graphNodes(graph uintptr) (int, error)
	destroyGraph(graph uintptr) error
	destroyExec(exec uintptr) error
}

var errNoGraphs = errors.New("cuda: the driver has no CUDA graph functions")
