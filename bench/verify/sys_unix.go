//go:build unix

package main

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// selfCPU is the CPU time (user + system) this process has used.
func selfCPU() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

func syncAll() { unix.Sync() }
