// Package verify checks a .qpack container: fast integrity (BLAKE3 of every
// file and expert blob against the manifest, with a receipt) and deep
// byte-for-byte comparison of every expert section and dense tensor against
// the source checkpoint.
package verify
