// Package metal is the Metal backend of the runner for Apple GPUs. It calls
// Metal through purego (no cgo), compiles its embedded MSL kernels at run time,
// and is cross-compiled and kernel-tested on Linux.
package metal
