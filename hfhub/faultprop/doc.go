// Package faultprop checks hfhub's download property under one corrupted
// response: for a seed it builds a small repository on a fake Hub
// (hfhub/hubtest), corrupts exactly one response chosen from the seed
// (model info JSON, a tree page, a small file, the range holding a shard's
// header, a data range; flipped bits, two swapped equal-length substrings,
// or a truncation), downloads into a fresh cache, and reports a violation
// unless the outcome is a byte-identical cache or a clear error that left
// no wrong byte in blobs/, snapshots/ or refs/.
//
// hfhub's tests run it for a few dozen seeds; bench/faultsoak runs it for
// thousands.
package faultprop
