// Package cuda is qpack's backend for NVIDIA GPUs on Linux, without cgo.
//
// The CUDA driver (libcuda.so.1) and NVRTC (libnvrtc.so.*) are loaded at run
// time with purego; every CUresult and nvrtcResult is checked and turned
// into an *Error naming the call. The kernels are CUDA C++ source embedded in
// the binary (kernels/*.cu, written against a thin prelude of macros for
// thread ids, barriers and warp reductions so the bodies can later be shared
// with the Metal kernels) and compiled by NVRTC for the device's compute
// capability when a Backend is opened. No CUDA toolkit is needed to build
// qpack; a machine without a driver or GPU gets an error wrapping
// ErrNoDevice.
//
// Backend implements today's runtime.Backend (MatMul, RMSNorm, SwiGLU) op by
// op: activations are copied through pinned host memory to device memory and
// back on one stream per call; weights lying in memory from Backend.Alloc
// (pinned, mapped host memory) are read by the GPU in place, any other weight
// is copied to the device for the call (nothing is cached per address, as
// runtime.Backend requires).
//
// Layer (Backend.LayerDevice) is the whole-layer seam, nn.Device: tensors,
// KV caches and recurrent states in device memory, dense weights uploaded
// once, routed experts in a device cache filled on a second stream, and every
// op queued as a kernel on the compute stream (README.md).
package cuda
