// Package verify checks a .qpack container: fast integrity (BLAKE3 of every
// file and expert blob against the manifest, with a receipt) and deep
// byte-for-byte comparison of every expert section and dense tensor against
// the source checkpoint.
//
// # What Verify checks
//
//  1. Structure (docs/FORMAT.md §7): manifest.json and layout.json parse and
//     follow every rule; no symbolic link or special file anywhere; every
//     listed file exists as a regular file of exactly the recorded size
//     (a truncated or extended file is named with the offset where it
//     differs); the layout agrees with the manifest; model.safetensors has a
//     valid header. Unlisted files are reported, not judged.
//  2. Digests: every byte of every listed file is read once, in large
//     sequential blocks (8 MiB), by one worker per core (files, or runs of
//     experts, are spread over the workers, largest first), and hashed with
//     BLAKE3. Each file is compared with qpack.fileDigests; each expert's
//     whole stride with qpack.expertDigests, so a bad blob is named by
//     layer and expert. layout.json is hashed before it is trusted: if it is
//     damaged, the layer files are checked by whole-file digest only.
//  3. Padding: the bytes of every expert blob outside its sections (gaps and
//     the padding up to the stride) must be zero; a non-zero byte is named
//     with its offset, digests or not.
//  4. With Options.Deep, the source comparison below, in the same pass
//     (see "Digests and deep check in one pass").
//
// # One digest or two per layer file
//
// Layer files are exactly the concatenation of their expert strides, so when
// every expert digest matches and the file has the right size, its bytes are
// the ones the writer hashed: the expert digests vouch for every byte. The
// whole-file digest adds one thing: it tells a damaged manifest entry from
// damaged data. If the file matches its digest but one expert does not, the
// manifest's expert digest is what is wrong (and the other way round), and
// the report says so (kind "manifest"). The two cannot share work: BLAKE3
// chunks are hashed with their position in the tree, so a blob hashed alone
// and the same bytes inside the file are different computations, and every
// layer byte would be hashed twice.
//
// Measured (bench/verify, 2 shared cores, a virtual disk, 2.85 GB): BLAKE3
// runs at about 2 GB per CPU-second here (zeebo/blake3, AVX2; Go's AVX-512
// implementation measured no faster), b3sum at about 3.5 GB (AVX-512).
// Hashing layer files twice made the cold check CPU-bound at 0.5x b3sum;
// hashing once keeps it disk-bound at 0.9x. So by default layer files are
// checked by their expert digests alone (each byte hashed once), and the
// other files by their file digests; Options.Full (`--full`) also checks
// the layer files' whole-file digests, in the same read, on a second
// goroutine fed from the same buffers. The report notes what was skipped.
//
// manifest.json is covered by no digest (it cannot hold its own). What is
// checked: its syntax and every rule, every size and digest it states (a
// damaged digest shows as a mismatch, and --full tells which side is at
// fault), and, once a verification has passed, its BLAKE3 against the
// receipt that verification left in the container: from then on any change
// to any byte of it is reported. Before that, on a first verification, its
// descriptive fields are checked against files the digests do cover:
// quantBits and quantGroupSize against the expert sections of layout.json
// (absent or null for float experts; for quantized ones bits in {2, 3, 4,
// 5, 6, 8}, group in {32, 64, 128}, and for every projection the inputs
// packed in the U32 weight, columns x 32 / bits, equal the scales' columns
// x group) and against the quantization config.json declares (the
// per-module override of the layer-0 switch_mlp or switch_glu projection,
// else the global bits and group_size), and modelName against config.json's
// model_type. A mismatch is a container problem naming manifest.json and
// the key. The free-text fields (sourceCheckpoint, qpack.toolVersion and
// qpack.source's provenance) have nothing to be checked against: only the
// receipt of an earlier verification protects them.
//
// Without digests (Swiftlet writes none) every file is still read and
// hashed, for the receipt, and the padding checked; the report notes that
// nothing could be compared.
//
// # The page cache
//
// A verification must not evict the user's working set with 45 GB of data
// it reads once. On Linux each file is opened with POSIX_FADV_SEQUENTIAL
// (a larger kernel read-ahead), a reader goroutine per worker keeps up to
// four blocks ahead of the hashers, and every block is dropped with
// POSIX_FADV_DONTNEED as soon as it has been copied out. Measured and left
// out: POSIX_FADV_WILLNEED on the next block (a quarter more CPU cold, no
// faster), mmap instead of pread (a quarter less CPU warm, a quarter more
// cold, and an I/O error becomes SIGBUS), and O_DIRECT for this pass
// (aligned buffers, offsets and lengths, refused by some file systems such
// as tmpfs and several FUSE and network mounts, and it would read from the
// disk what the page cache already holds, as after a copy; the deep check
// uses it, with a fallback, see below). On darwin reads use
// F_NOCACHE. Options.KeepCache turns all of this off. (A deep check run
// alongside keeps the pages of a container file until they are compared,
// bounded by DeepOptions.Window; see below.)
//
// # Deep check
//
// Verify derives, on its own and without package repack, which source
// bytes each container byte must equal, so that it cross-checks the repack:
// a dense tensor of model.safetensors is the source tensor of the same name
// (same dtype and shape); section s of layer L's expert e is bytes
// [e×B/E, (e+1)×B/E) of the stacked source tensor
// "<prefix>layers.L.<module path>.switch_mlp.s" (or switch_glu), whose
// shape must be [E] + the section's shape. Tensors of multi-token prediction
// and vision towers are ignored; source tensors the container does not hold
// are listed in a note.
//
// Each source shard is read once, in order, in large blocks (several in
// flight: 2 readers of 8 MiB blocks for a directory, 8 range requests of
// 16 MiB for the Hub); every block goes to two consumers, one that feeds
// sha256 (and the git blob id where the Hub gives that instead), and one
// that cuts the container slices mapped into the block into pieces of at
// most 1 MiB for a pool of comparers. A block returns to its reader when
// the hasher and all its pieces are done, so the comparisons of several
// blocks overlap the hashing and the next reads (a fixed number of buffers
// bounds the memory). At the end the shard's hash is checked against
// everything that says what it must be: the manifest's recorded sha256,
// the Hub listing, the name of an HF cache blob. Nothing of the source is
// stored. A difference is blamed on the container, unless the shard failed
// its hash check, in which case it is blamed on the source (and the run is
// "unusable", exit code 2). The hasher also compares the shard's first
// bytes with the header bytes the map was built from: when they differ,
// the map (and every difference found with it) says nothing about the
// container, and only the source is reported. Before anything is streamed,
// the source's shard names and sizes (and hashes, where both sides know
// them) must match the ones the manifest records, and the container's side
// files (config, tokenizer and template files) are compared whole with the
// source's hash-checked copies. Sources come from package checkpoint
// (FromCheckpoint): a directory, an HF cache snapshot, or a Hub repository
// read through the cache where it holds the files (offline from the cache
// alone).
//
// # Digests and deep check in one pass
//
// Both passes read the container: the digest pass sequentially, the deep
// check in source order, which for expert sections is strided (section s
// of expert e at e×stride+offset, small pieces for scales and biases). Run
// one after the other, the container is read twice, once in small
// scattered reads. So by default (DeepOptions.Window >= 0, except on
// darwin, whose cache cannot be dropped by range) they run together: the
// digest pass hashes the container files in the order the source streams
// will need them and leaves their pages in the page cache; a stream that
// reaches a file waits until it is hashed, then compares through a
// read-only memory mapping (no copy; a fault, should the file shrink
// meanwhile, is a read error), and the file's pages are dropped when no
// stream needs it any more. What is hashed ahead and not yet compared is
// bounded by the window (DefaultWindow, 2 GiB: one layer file of the
// largest models; the file a stream waits for goes first, window or not).
// Files larger than the window are read by each pass on its own. The
// results are the same either way (the tests run both).
//
// Source shards on a local disk are read with O_DIRECT where their pages
// are not cached (mincore tells), and so are the container files the deep
// check reads on its own (not shared): the disk writes into the buffer, which saves the kernel's copy and
// its cache bookkeeping and needs no dropping; file systems that refuse it
// get ordinary reads.
//
// Measured (bench/verify, 2 cores shared with other work, a virtual disk
// of about 1.3 GB/s, 2.85 GB container and as much source, cold): the
// whole `verify-install --deep` took 10 to 19 s with the passes in turn
// (before this design, depending on the load of the machine) and takes 5.1
// to 7.5 s together; the benchmark's best of 3 is 5.3 s, 0.86x of a plain
// read of the source and the container (4.6 s: the bytes the run must
// read). Against a plain read of the source alone (2.1 s) that is 0.39x,
// and it cannot come near 1 while both reads share one disk. The CPU time
// is about 5.5 s, of which sha256 2.5 s (SHA-NI, as fast as OpenSSL here)
// and BLAKE3 1.4 s: on busy cores the run is CPU-bound. Measured and left
// out: hashing the shared files through the mapping (MADV_POPULATE_READ)
// instead of reading them, which moved CPU time from the kernel to the
// hashers without saving any.
//
// With DeepOptions.Sample, only N random experts per layer are compared,
// reading only their slices from the source; dense tensors are skipped and
// shard hashes cannot be checked, which the report says.
//
// # Results
//
// The Report names every problem with its scope (container or source),
// kind, file, and where known the manifest key, layer, expert, section,
// tensor and byte offset. Its status gives the exit code of `qpack
// verify-install`: 0 ok, 1 the container is damaged, 2 the input is unusable
// (not a container, an unsupported version, a structure that breaks the
// format while its bytes are as written, or a source that cannot serve as a
// reference). On success NewReceipt and WriteReceipt record
// verified-install.json atomically: the manifest's digest, the time, and
// every file's size and digest.
//
// ExpertChecker lets a runner check each expert blob against its digest the
// first time it reads it.
package verify
