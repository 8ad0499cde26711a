// Package nn holds the model-neutral building blocks that every
// architecture of the runner is written with: the Device seam, on which a
// graph queues a whole layer's work over tensors the device owns (device.go;
// HostDevice is the reference implementation, over the Backend seam for the
// heavy products), RMSNorm and RoPE variants, a KV-attention core over a
// full or sliding-window (ring-buffer) cache, the Gated DeltaNet conv and
// recurrence, a GLU MLP with its activation as a parameter, the residency
// hook (Binding) that makes a graph's dense weights resident on a device
// once, and the one MoE dispatcher that implements the expert-streaming
// protocol (route, group tokens by expert, ask the device's expert cache,
// prefetch and speculate, read, release, combine) against an ExpertSource,
// or hands the whole routed block to a device that holds the layer's
// experts itself (ExpertRouter, router.go). Fused ops (fused.go: the
// residual add with the next norm, several products of one input) are
// optional interfaces a device implements where they save it launches;
// their helpers fall back to the plain ops.
//
// Nothing here knows a tensor name or a model_type. Architectures (packages
// under runtime/models) compose these blocks and register themselves with
// package runtime.
package nn
