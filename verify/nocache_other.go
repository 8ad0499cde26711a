//go:build !linux && !darwin

package verify

import "os"

// Elsewhere reads go through the page cache as usual.

func adviseSequential(*os.File) {}

func adviseRandom(*os.File) {}

func dropCache(*os.File, int64, int64) {}

func adviseReadAhead(*os.File) {}

// canShare: reads go through the cache anyway.
const canShare = true
