// Package fifotest helps tests prove that a loader refuses a FIFO in place
// of a file instead of blocking on it.
package fifotest
