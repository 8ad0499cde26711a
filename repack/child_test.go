package repack

// childMain runs a repack in a child process for the kill tests (see
// kill_test.go); it returns false when this process is not such a child.
func childMain() bool { return false }
