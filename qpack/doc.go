// Package qpack implements the .qpack v1 container (see docs/FORMAT.md): a
// directory holding a manifest, the dense tensors as one safetensors file, and
// every routed expert of each layer as a fixed-stride blob that one pread
// fetches. The reader validates every size, offset and path before trusting
// it; the writer makes files appear atomically. It knows nothing of HTTP.
package qpack
