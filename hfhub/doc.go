// Package hfhub is a client for the Hugging Face Hub: model info, tree listing,
// resolve with pinned revisions, hash-verified parallel range reads exposed as
// io.ReaderAt, retries, and the official cache layout. It imports nothing else
// from this module.
package hfhub
