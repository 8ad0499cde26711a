// Package hfhub is a client for the Hugging Face Hub: model info, tree
// listing, resolve with pinned revisions, validated parallel range reads
// exposed as io.ReaderAt, retries, and the official cache layout. It imports
// nothing else from this module.
//
// # Client
//
// NewClient(Options{}) takes its endpoint from HF_ENDPOINT and its token
// from HF_TOKEN, HUGGING_FACE_HUB_TOKEN or $HF_HOME/token (LookupToken). The
// token is sent only to the endpoint's own host and port, never to a
// redirect target such as the CDN, and never appears in logs or errors.
// Errors from the Hub are *HubError values that unwrap to ErrRepoNotFound,
// ErrGatedRepo, ErrRevisionNotFound, ErrEntryNotFound, … and read as advice
// ("repository X not found, or it is private/gated: … set HF_TOKEN").
//
// Resolve / ModelInfo pin a revision to its commit; ListFiles pages through
// the recursive tree listing and refuses unsafe paths ("..", absolute, …);
// HeadFile reads X-Repo-Commit, X-Linked-Etag/ETag and
// X-Linked-Size/Content-Length, following relative and absolute redirects.
//
// # Range reads
//
// OpenFile returns a *RemoteFile (io.ReaderAt). ReadRanges coalesces ranges
// into requests and runs several at once. An answer is used only when its
// body provably is what was asked (RFC 9110): a Content-Range equal to the
// range asked makes it partial content whatever the status (206, or 200 as
// ModelScope sends), with identity encoding and a Content-Length (if any)
// of the range's length; a 200 without Content-Range is the whole file and
// is used when the range starts at byte 0 (what is needed is read, the rest
// dropped). A server that answers a later range with the whole file makes
// that file fall back to one sequential stream (logged once at Warn; its
// hash is still checked). A request for a whole file (a small file of one
// chunk) is sent without Range. Anything else is retried and never used
// (the conformance table is TestRangeAnswerConformance). Retries
// (go-retryablehttp) cover timeouts, resets, stalls, 408, 429 and 5xx with
// exponential backoff, jitter and a capped Retry-After; a cut or stalled
// body resumes from its last byte; an expired signed URL is resolved again.
//
// Laggards are hedged (Options.Hedge): the client compares the throughput
// of its active range streams (bytes per second spent waiting in body
// reads, so a slow consumer does not count) every Interval; a stream whose
// current attempt has waited MinWait and delivers under Ratio times the
// median of the others (and of streams finished in the last minute, so the
// last one left is judged too; with nothing to compare against, under
// MinRate) gets a second request for its remaining
// bytes on another connection. The first 64 KiB of that answer are read;
// if they arrive before the laggard finishes, the laggard is cancelled and
// reading continues from the hedge at the byte reached (bytes already
// received are kept; the sha256/sha1 chain still covers every byte). At
// most MaxPerStream hedges per stream, one at a time. Download and
// RemoteFile reads (repack's StreamRange/ReadAt) share this.
//
// # Bounds
//
// Every wait and every size taken from the network is bounded:
//
//   - Stall: StallTimeout (default 30 s) without a byte while the client
//     waits — for response headers or inside a body read — abandons the
//     attempt (ErrStalled, retried up to MaxRetries, default 5). It applies
//     to every HTTP attempt: API JSON, error bodies, HEAD, resolve, CDN,
//     each redirect hop. Time the caller spends between reads is not
//     counted. A server that sends headers and then nothing costs at most
//     (MaxRetries+1) × StallTimeout plus backoffs.
//   - Sizes: an API JSON body at most 64 MiB (maxJSONBytes); an error body
//     read for its message at most 64 KiB (maxErrorBody), a dropped body at
//     most 4 KiB (maxDrainBody); at most 1,000,000 files (maxFiles), a file
//     at most 1 PiB, a path at most 4096 bytes; a resume record at most 64
//     MiB.
//   - Pagination: every tree page but the last must hold an entry (an empty
//     page with a next link is an error); pages are capped by the entries
//     (files and their directories) model info lists plus 16
//     (treePageSlack; Download, ListFilesOf), or 100,000 when that is not
//     known (ListFiles); a next link seen before is an error.
//   - Redirects: at most 10, no loops; a signed URL is re-resolved at most
//     10 times per file.
//   - Hedging: Ratio 0.25, MinWait 2 s, Interval 250 ms, MaxPerStream 3,
//     MinRate 32 KiB/s (a lone stream),
//     one 64 KiB probe per hedged stream (hedges run outside Download's
//     connection cap: at most one extra connection per stream).
//   - Backoff: RetryWaitMin 1 s to RetryWaitMax 30 s; Retry-After /
//     RateLimit honoured up to MaxRetryAfter (60 s).
//   - Locks: waiting for another live download of the same blob (flock
//     dies with its holder) is logged after 2 s (lockWaitNotice) and lasts
//     until that download ends or the context is cancelled.
//
// # Downloads
//
// Download writes into the official cache (blobs/<etag>, relative snapshot
// symlinks, refs/<rev> without newline, trees/<commit>.json, flock on
// .locks/<repo>/<etag>.lock) or a local dir with the official
// .cache/huggingface/download metadata. Files are fetched as parallel ranges
// into <etag>.qpack-part (never "<etag>.incomplete", which older official
// clients would trust) with a resume record <etag>.qpack-part.json naming
// the file's path and commit and listing the finished ranges; a killed
// download continues where it stopped. Each file is hashed in order while
// later ranges still download (sha256 for LFS files, git blob sha1
// otherwise; on resume what is on disk is hashed again) and is renamed into
// place only if the hash matches. refs/<rev> is written only when every
// selected file is in place; a completed run then removes the partial blobs
// and records that earlier runs left for the same paths at other ETags.
//
// With LocalDir nothing qpack did not download is overwritten or deleted:
// a file whose .cache/huggingface/download metadata exists was downloaded
// there (by qpack or huggingface_hub) and may be replaced; a file without
// metadata is adopted if its content hashes to the file's, else refused
// (LocalFileError, ErrLocalFileConflict) and left unchanged; symlinks,
// directories and other non-regular files in the way are always refused.
// Offline (or HF_HUB_OFFLINE=1) answers from the cache alone.
//
// # Errors
//
// errors.Is distinguishes ErrRepoNotFound, ErrGatedRepo, ErrUnauthorized,
// ErrRevisionNotFound, ErrEntryNotFound (the Hub said so), ErrInvalidInput
// (a repository id or revision refused before any request),
// ErrLocalFileConflict, ErrHashMismatch, ErrBadResponse, ErrStalled,
// ErrNotCached, and context.Canceled / context.DeadlineExceeded for an
// interrupted download. Each message names its file once.
//
// Package hubtest is a fake Hub for tests of all this.
package hfhub
