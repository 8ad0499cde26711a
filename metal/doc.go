// Package metal is the runner's backend for Apple GPUs. It calls Metal
// through purego's Objective-C bridge (no cgo, so Linux CI cross-compiles
// it), compiles its embedded MSL kernels (kernels/*.metal, see Source) at
// run time, and implements runtime.Backend, Ops and nn.Layered on
// *Backend: LayerDevice is the whole-layer nn.Device (Device), which runs a
// layer as one command buffer on the kernel bodies shared with the CUDA
// backend (internal/gpukernels, through kernels/01_prelude.metal) and the
// GEMVs. On other systems New returns ErrUnsupported.
//
// The kernels' arithmetic is tested on Linux: the tests compile the same
// source as C++ against a small Metal shim (shim/) and run the same Backend
// over it; see README.md for what has run where.
package metal
