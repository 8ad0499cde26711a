// Package checkpoint opens a model checkpoint for repack and verify, from
// wherever it is, as one Source: a local directory, a snapshot in the
// Hugging Face cache (written by qpack or by the official client) or a
// repository on the Hub at a pinned commit.
//
// A Source gives the checkpoint's files by repository path, its
// safetensors shards as io.ReaderAt with their parsed headers, the exact
// header bytes those headers were parsed from, and the digest each file's
// bytes must have and who says so. Layering: it sits below repack and
// verify and uses hfhub (the Hub and the cache), safetensors and qpack; the
// runtime does not use it.
//
// # Where bytes come from
//
// A Hub source lists the repository at the pinned commit and, for every
// file, uses the cache's blob named after the file's ETag (blobs/<sha256>
// for LFS files, blobs/<git blob sha1> for the rest; or the pinned
// snapshot's own copy, where the cache was written without symlinks) when
// it is a regular file of the listed size, and the Hub otherwise. Nothing is written to the
// cache. A cached blob is not trusted for its name: its bytes are hashed
// like fetched ones (small files here, shards by the reader's hash chain)
// and compared with the Hub listing's digest; a small cached file that does
// not match is fetched again. Offline (HubOptions.Offline or
// HF_HUB_OFFLINE=1) the revision is resolved through refs/ and the files
// are those of the cached snapshot; the digest a file must have is the one
// in the cached listing trees/<commit>.json when the cache has it, else its
// blob's name. A file the checkpoint needs that the cache lacks is an error
// wrapping hfhub.ErrNotCached that names it.
//
// # What is checked
//
// Only bytes covered by a checked hash may shape an output. Small files
// (config.json, the index, tokenizer and template files) are hashed whole
// as they are read, and refused when the digest differs. A shard's header
// is read with two small reads before its bytes stream; the caller streams
// every shard byte through its sha256 and must compare the stream's first
// len(HeaderBytes) bytes with HeaderBytes (StreamCheck does this), so that
// a header that is not the hashed one fails instead of shaping a plan. A
// local directory publishes no digests (except a link into an HF cache
// blob, whose name is one); its shards' hashes are computed and recorded.
//
// Local files are opened only when they are regular files (or symlinks to
// them): a FIFO, device or socket is refused before any blocking open.
package checkpoint
