//go:build !linux

package main

import "os"

// dropFile cannot evict pages here; -drop-all (root) is the only way, and
// "cold" figures are otherwise warm.
func dropFile(*os.File) {}
