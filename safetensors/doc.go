// Package safetensors reads and writes the safetensors format: headers read
// from any io.ReaderAt with two reads, strict validation with overflow-safe
// arithmetic, sharded checkpoints with model.safetensors.index.json, and a
// streaming writer that never holds all tensors in memory. It imports nothing
// else from this module.
package safetensors
