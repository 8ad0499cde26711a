// Package repack turns an MLX checkpoint (a local directory or a Hub repo, both
// seen as one io.ReaderAt per shard) into a .qpack container: it plans every
// tensor copy from the shard headers, executes coalesced range reads with
// positional writes, and keeps a journal so a killed repack resumes.
package repack
