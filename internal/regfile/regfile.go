package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// NotRegularError reports a path that is not a regular file (nor a symlink
// to one).
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: not a regular file (%s)", e.Path, Describe(e.Mode))
}

// Describe names the kind of file a mode says, for messages: "a FIFO",
// "a socket", "a character device", "a block device", "a directory", "a
// symlink".
func Describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "mode " + m.String()
}

// Check reports whether path (following symlinks) is a regular file,
// without opening it: a *NotRegularError if it is something else, the
// stat error if it cannot be found.
func Check(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return st, nil
}

// Open opens path for reading if it is a regular file (following
// symlinks), and never blocks when it is not: see the package doc.
func Open(path string) (*os.File, fs.FileInfo, error) {
	if _, err := Check(path); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return f, st, nil
}

// ReadFile reads the whole regular file at path, refusing one larger than
// max bytes (before reading it) and one that grows past max while read.
func ReadFile(path string, max int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > max {
		return nil, &TooLargeError{Path: path, Size: st.Size(), Max: max}
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, &TooLargeError{Path: path, Size: -1, Max: max}
	}
	return data, nil
}

// TooLargeError reports a file over a size limit; Size is -1 when it grew
// past the limit while being read.
type TooLargeError struct {
	Path      string
	Size, Max int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s: more than the %d bytes allowed", e.Path, e.Max)
	}
	return fmt.Sprintf("%s: %d bytes, more than the %d allowed", e.Path, e.Size, e.Max)
}

// IsNotRegular reports whether err is a *NotRegularError.
func IsNotRegular(err error) bool {
	var e *NotRegularError
	return errors.As(err, &e)
}
