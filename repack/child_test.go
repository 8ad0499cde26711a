package repack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/qpack-go/qpack/hfhub"
)

// childEnv carries a childSpec to a re-executed test binary that then runs
// one repack and exits (the kill tests kill it with SIGKILL mid-run).
const childEnv = "QPACK_REPACK_TEST_CHILD"

type childSpec struct {
	Endpoint    string
	Repo        string
	Output      string
	RangeSize   int64
	Tile        int
	Connections int
	RangeDelay  time.Duration // after each range a worker wrote
	FinishDelay time.Duration // after the last range, before Finish
}

func (c childSpec) options() Options {
	return Options{
		FromHF: c.Repo, Output: c.Output, Endpoint: c.Endpoint, Reserve: -1, RangeSize: c.RangeSize, TileSize: c.Tile,
		Connections: c.Connections, ToolVersion: "test",
		Hub: hfhub.Options{Anonymous: true, MaxRetries: 4, RetryWaitMin: 5 * time.Millisecond, RetryWaitMax: 20 * time.Millisecond,
			StallTimeout: 2 * time.Second},
	}
}

// childMain runs a repack in a child process for the kill tests; it
// returns false when this process is not such a child.
func childMain() bool {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return false
	}
	var c childSpec
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	o := c.options()
	o.hooks = &testHooks{
		afterRange: func(srcRange, bool) { time.Sleep(c.RangeDelay) },
		beforeFinish: func() error {
			time.Sleep(c.FinishDelay)
			return nil
		},
	}
	if _, err := Run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}
