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
// into requests and runs several at once. Every answer must be an exact 206
// (Content-Range equal to the range asked, identity encoding, the right
// length) or it is retried and never used. Retries (go-retryablehttp) cover
// timeouts, resets, 408, 429 and 5xx with exponential backoff, jitter and a
// capped Retry-After. A stall watchdog aborts a body that delivers fewer
// than StallMinBytes per StallTimeout and resumes from the last byte
// received; an expired signed URL is resolved again.
//
// # Downloads
//
// Download writes into the official cache (blobs/<etag>, relative snapshot
// symlinks, refs/<rev> without newline, trees/<commit>.json, flock on
// .locks/<repo>/<etag>.lock) or a local dir with the official
// .cache/huggingface/download metadata. Files are fetched as parallel ranges
// into <etag>.qpack-part (never "<etag>.incomplete", which older official
// clients would trust) with a resume record <etag>.qpack-part.json listing
// the finished ranges; a killed download continues where it stopped. Each
// file is hashed in order while later ranges still download (sha256 for LFS
// files, git blob sha1 otherwise; on resume what is on disk is hashed again)
// and is renamed into place only if the hash matches. Offline (or
// HF_HUB_OFFLINE=1) answers from the cache alone.
//
// Package hubtest is a fake Hub for tests of all this.
package hfhub
