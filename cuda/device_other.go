//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"fmt"
	goruntime "runtime"
)

func openDevice(ordinal int) (device, error) {
	return nil, fmt.Errorf("cuda: %s/%s: %w", goruntime.GOOS, goruntime.GOARCH, ErrNoDevice)
}
