// Package regfile opens local files that must be regular files without ever
// blocking on something that is not one.
//
// A FIFO (or a symlink to one) blocks open(2) for reading until a writer
// appears, and a character device may block or never end. Open checks the
// path with stat(2) first, opens with O_NONBLOCK (which makes open return at
// once for a FIFO), and checks the opened descriptor again with fstat(2), so
// that a file swapped between the two checks is refused too.
package regfile
