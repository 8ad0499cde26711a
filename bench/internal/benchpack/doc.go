// Package benchpack is what the benchmark commands share (bench/runner,
// bench/gpu): streaming a synthetic .qpack container at a real model's
// per-layer dims to disk after a free-space check, with a tiny model's
// tokenizer beside it; the disk's pread bandwidth of whole expert blobs at
// random offsets (the I/O limit's numerator); and the host's load average and
// available memory, printed beside the figures.
package benchpack
