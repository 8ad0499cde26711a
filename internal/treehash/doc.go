// Package treehash digests a directory tree, for tests that must show an
// operation left a directory (or file) byte for byte as it was: every
// entry's path, type, permission bits and size, a regular file's contents,
// a symlink's target. It never follows a symlink nor opens anything but a
// regular file (a FIFO is recorded, not read).
package treehash
