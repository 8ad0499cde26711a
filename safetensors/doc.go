// Package safetensors reads and writes the safetensors format: headers read
// from any io.ReaderAt with two reads, strict validation with overflow-safe
// arithmetic, sharded checkpoints with model.safetensors.index.json, and a
// streaming writer that never holds all tensors in memory. It imports nothing
// else from this module.
//
// Reading: ReadHeader (or ReadFileHeader) reads the 8-byte little-endian
// header length and then the header JSON, and never touches tensor data.
// The header is at most MaxHeaderLen bytes and must fit in the file; its
// JSON must be one object with no duplicate keys, "__metadata__" a map of
// strings, and every tensor exactly {"dtype", "shape", "data_offsets"} with
// a known whole-byte dtype, at most MaxRank non-negative dims, and a byte
// range inside the data area whose length is dtype size x element count
// (overflow-checked). Non-empty tensors may not overlap; zero-size tensors
// may sit anywhere inside the data area. Gaps are tolerated (Header.Contiguous
// says whether the file is gap-free, as the Python library demands). Bad
// input gives a *FormatError naming the file and, where there is one, the
// tensor.
//
// Checkpoints: ParseIndex validates model.safetensors.index.json (bounded by
// MaxIndexLen; shard names must be plain file names) and OpenCheckpoint
// cross-checks an index against its shards' headers, or opens a single-file
// checkpoint.
//
// Writing: PlanFile lays out a file (header JSON padded with spaces to a
// multiple of 8, as the Python library does; data in spec order, back to
// back) for positional writers; Writer streams one tensor at a time from
// io.Readers; WriteFile does it atomically.
//
// Compatibility with the reference Python library was checked once, both
// ways; the files, script and output are in testdata/pycheck/ at the
// repository root and pycheck_test.go keeps them honest.
package safetensors
