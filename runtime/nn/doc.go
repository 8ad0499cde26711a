// Package nn holds the model-neutral building blocks that every
// architecture of the runner is written with: the Backend seam for the
// heavy products, RMSNorm and RoPE variants, a KV-attention core over a
// full or sliding-window (ring-buffer) cache, a GLU MLP with its activation
// as a parameter, and the one MoE dispatcher that implements the
// expert-streaming protocol (route, group tokens by expert, prefetch and
// speculate, read, release, combine) against an ExpertSource.
//
// Everything works on row-major float32 slices and mlxq matrices; nothing
// here knows a tensor name or a model_type. Architectures (packages under
// runtime/models) compose these blocks and register themselves with
// package runtime.
package nn
