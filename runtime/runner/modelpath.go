package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/qpack-go/qpack/runtime"
)

// ErrNoModel is wrapped by CheckModelPath's errors: the path holds no model.
var ErrNoModel = errors.New("no model")

// CheckModelPath reports, before anything is read, a path that cannot hold
// a model: one that does not exist, is not a directory, or holds neither
// manifest.json (a .qpack container) nor config.json (an MLX checkpoint).
// The errors wrap ErrNoModel.
func CheckModelPath(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return noModel("model directory %s does not exist", path)
	case err != nil:
		return noModel("model directory %s: %v", path, unwrapPath(err))
	case !st.IsDir():
		return noModel("%s is a file, not a .qpack container or an MLX checkpoint directory", path)
	}
	if runtime.IsContainer(path) {
		return nil
	}
	cfg := filepath.Join(path, "config.json")
	if _, err := os.Stat(cfg); errors.Is(err, fs.ErrNotExist) {
		return noModel("%s is neither a .qpack container (no manifest.json) nor an MLX checkpoint (no config.json)", path)
	} else if err != nil {
		return noModel("%s: %v", cfg, unwrapPath(err))
	}
	return nil
}

// noModelError is an error of CheckModelPath: it is ErrNoModel to
// errors.Is, without repeating its text.
type noModelError struct{ msg string }

func (e *noModelError) Error() string   { return e.msg }
func (e *noModelError) Is(t error) bool { return t == ErrNoModel }

func noModel(format string, args ...any) error {
	return &noModelError{fmt.Sprintf(format, args...)}
}

// unwrapPath drops the operation and path of an *fs.PathError, which the
// message names already.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// loadError is an error from loading the model at path, with the path
// named once in front (the qpack package's errors name the file inside the
// container after a "qpack: " prefix, which the path replaces).
type loadError struct {
	path string
	err  error
}

func (e *loadError) Error() string {
	return e.path + ": " + strings.TrimPrefix(e.err.Error(), "qpack: ")
}

func (e *loadError) Unwrap() error { return e.err }

// WrapLoadError names the model path in an error from loading it, unless
// the error names it already (an MLX checkpoint's errors name their
// files); nil stays nil.
func WrapLoadError(path string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if p := filepath.Clean(path); p != "." && (strings.Contains(msg, p+string(filepath.Separator)) || strings.Contains(msg, p+":")) {
		return err
	}
	return &loadError{path: path, err: err}
}
