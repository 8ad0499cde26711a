package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropPages writes back and evicts the files' pages (POSIX_FADV_DONTNEED),
// so the next read comes from the disk; the rest of the page cache (other
// users of this machine) is left alone.
func dropPages(files []string) {
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		f.Sync()
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
}
