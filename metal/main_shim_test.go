//go:build !darwin

package metal

import (
	"fmt"
	"os"
	"testing"
)

// TestMain closes the harness processes the tests share once they are done;
// a harness that does not exit by itself fails the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := closeSharedShims(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
