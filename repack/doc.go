// Package repack turns an MLX checkpoint (a local directory or a Hub repo,
// opened by package checkpoint and seen as one io.ReaderAt per shard; a Hub
// repo is read from the HF cache where it holds the files) into a .qpack
// container: it plans every tensor copy from the shard headers, executes
// coalesced range reads with positional writes, and keeps a journal so a
// killed repack resumes. The committer checks that each shard's hashed
// bytes start with exactly the header bytes the plan was built from; a
// difference stops the repack before the range is journaled and discards
// the partial directory.
//
// # Plan
//
// PlanSource reads config.json and each shard's header (two small reads per
// shard) and BuildPlan maps every tensor: stacked routed experts
// (*.switch_mlp.* / *.switch_glu.*, [E, ...]) to their section in every
// expert blob of their layer, other tensors to model.safetensors, mtp.* and
// vision/audio towers to the skipped list. Everything inconsistent is an
// error before a byte is written.
//
// # Execute
//
// Every shard is cut into ranges of RangeSize bytes (32 MiB) that tile it
// from byte 0 to its end, so that every byte of every shard passes through
// its hash; bytes that go nowhere (the header, skipped tensors) are "gap"
// bytes. Workers (8 for the Hub, 2 for a directory) stream ranges through a
// small tile buffer and write each piece with a positional write into the
// pre-sized files of a qpack.Writer in "<output>.partial/" (a local shard's
// pieces are copied inside the kernel instead, with copy_file_range on
// Linux); gap bytes go to a per-range spill file in the partial directory.
//
// One committer takes the ranges strictly in order. For each it re-reads
// from disk what the range wrote (and its spill file), in source order, and
// feeds those bytes to the shard's sha256 (and, for a Hub file stored
// without LFS, its git blob sha1); for a range with gap bytes, the written
// bytes also go to a BLAKE3 range digest. At a shard's last range the hash
// is compared with what the Hub published; a mismatch fails the repack,
// names the shard, and drops the shard from the journal so a rerun fetches
// it again. Workers may run ahead of the committer by at most 2N+2 ranges,
// which bounds memory (N tiles) and spill space.
//
// Once the last range that writes to an expert layer is committed (and no
// redo of a damaged range is pending), the layer is sealed
// (qpack.Writer.SealLayer): the Writer refuses further writes to it and
// hashes its file and expert blobs in the background while later layers
// are copied, so that Finish only hashes what is left (the last layer,
// model.safetensors, the side files).
//
// # Journal and resume
//
// The journal (<output>.partial/.repack-journal.json) is bound to the plan's
// fingerprint, the range size and the source's identity (commit, or the
// shards' names, sizes and modification times). It holds the frontier F:
// ranges [0, F) are complete: written, fsynced, re-read and hashed. It
// records, per completed range, the marshalled sha256 state of its shard
// after it (the chain) and, for a range with gap bytes, its BLAKE3 range
// digest; the sha256 of every finished shard; and the sha256 midstate of
// the shard F is in. It is replaced atomically (temp file, fsync, rename,
// directory fsync) after fsyncing the container's files, in the background
// every 256 MiB or 2 s.
//
// A resumed run re-checks ranges [0, F) from disk, each by itself: a range
// whose bytes all land in the container by hashing them with sha256 from
// the chain state before it, which must give the state recorded after it;
// a range with gap bytes (not kept) by its BLAKE3 range digest. It fetches
// again only the ranges whose bytes changed (their hash is already in the
// midstate; the re-fetched bytes must pass the same check), then continues
// the shard hash from the midstate at F. No completed range is fetched
// again.
//
// Ranges at or after F that were in flight are not lost either: after every
// tile (TileSize, 2 MiB by default) it wrote, a worker records how many of
// its range's bytes are in place and a BLAKE3 digest of them in source
// order (domain-separated from range digests and bound to the range's id,
// shard and offset); the journal carries these records, saved with the
// other commits and every 2 s while ranges are slow to arrive. A resumed
// run re-reads such a prefix from disk (the spill file for gap bytes),
// compares its digest, and fetches only the rest of the range; a prefix
// that does not match is dropped and its range fetched whole. The prefix
// digest only decides what need not be fetched again: every byte still
// passes the sha256 chain, re-read from disk, when its range is committed.
// An interrupt or a kill therefore loses at most a tile per connection
// (plus what the network had in flight).
// Because completion is in order, the bytes hashed are always exactly the
// shard's bytes in order: there is no need to re-assemble the shard.
//
// A changed plan, range size or source is refused unless DiscardPartial is
// set. An exclusive flock on "<output>.lock" keeps two repacks apart.
// qpack's Finish puts the digest of every file and expert blob into the
// manifest (hashing those not hashed after sealing), removes the working
// files (journal, spill directory), renames the directory into place and
// fsyncs the parent; a run killed in there resumes too (a finished partial
// directory is checked against its manifest's digests and renamed; a
// complete container from the same Hub commit is reported as already
// complete).
//
// Output safety (output.go): before anything is written, Run refuses an
// output, partial directory or lock file that is the source directory,
// lies inside it or contains it (resolved real paths, and os.SameFile for
// the same directory by another path); Overwrite replaces only a qpack
// container (qpack.CheckContainerDir), and an existing partial directory is
// resumed or removed only when qpack made it (qpack.PartialMarker, or a
// journal). A refusal is an *OutputError (ErrUnsafeOutput).
package repack
