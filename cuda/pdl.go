package cuda

// Programmatic dependent launch (compute capability 9.0 on, CUDA 12.x
// drivers): a kernel launched with the programmatic-stream-serialization
// attribute may start while the kernel before it on the stream still runs;
// its groups then wait in qp_grid_wait() (kernels/00_prelude_cuda.h) until
// that kernel has completed and its writes are visible. At decode a step is
// ~120 kernels of a few microseconds each, and the gap between two of them
// (the next kernel's launch, its groups' start, its first loads) is most of
// a small kernel's time: under a dependent launch that gap overlaps the
// kernel before, and the matvecs' weights (which no kernel writes) are
// prefetched into the L2 before the wait.
//
// The attribute is set only on a launch captured into a CUDA graph (the
// recorder's: a decode step's layers, replayed at no host cost per node;
// launched one by one, as a prefill's are, cuLaunchKernelEx costs the host
// more than cuLaunchKernel and a 4,096-token prefill, host-bound, ran
// 6-9% slower), whose previous operation on the compute stream was a
// kernel launch (copies, memsets, event waits and graph launches in
// between order the stream the ordinary way), when both kernels have at
// most pdlMaxGroups groups, and never when QPACK_CUDA_PDL=0. Every kernel calls qp_grid_begin() before it
// touches memory another kernel writes or reads (cuda/source_test.go).

const pdlEnv = "QPACK_CUDA_PDL"

// pdlMaxGroups bounds the grids of kernels launched as dependents, and of
// the kernels they depend on: a decode step's kernels have at most ~1,000
// groups (its largest matvec, lm_head at 32K rows) and gain 0.3-1 us each
// (bench DecodeKernels, in graphs); a long kernel of many waves has little
// to gain from hiding one launch.
const pdlMaxGroups = 1024

// CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const launchAttrProgrammaticSerialization = 6

// launchAttr is CUlaunchAttribute: the id, 4 bytes of padding, and the
// 64-byte value union (programmaticStreamSerializationAllowed is an int
// at its start).
type launchAttr struct {
	id    uint32
	_     uint32
	value [64]byte
}

// launchConfig is CUlaunchConfig (cuLaunchKernelEx's first argument).
type launchConfig struct {
	grid      [3]uint32
	block     [3]uint32
	sharedMem uint32
	_         uint32
	stream    uintptr
	attrs     uintptr // *launchAttr
	numAttrs  uint32
	_         uint32
}

// pdlWanted reports whether dependent launches are used on a device of
// compute capability major.minor whose driver has cuLaunchKernelEx.
func pdlWanted(major int, haveLaunchEx bool, getenv func(string) string) bool {
	return major >= 9 && haveLaunchEx && getenv(pdlEnv) != "0"
}

// pdlSwitch turns dependent launches on or off (benchmarks compare the
// two in one run); it returns whether they were on. Turning them on has
// no effect where pdlWanted was false for want of the driver's function.
type pdlSwitch interface {
	setDependentLaunch(on bool) bool
}
