package qpack

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/qpack-go/qpack/safetensors"
)

// Sentinel errors a caller can test with errors.Is. Every error the reader
// returns for bad input is an *Error that wraps one of these or carries a
// message naming the file and key.
var (
	// ErrNotContainer: the directory has no manifest.json or its magic is not "QPACK".
	ErrNotContainer = errors.New("not a qpack container")
	// ErrUnsupportedVersion: the manifest's major version is not one this package reads.
	ErrUnsupportedVersion = errors.New("unsupported qpack format version")
	// ErrInvalid: a structural or consistency rule of the format is broken.
	ErrInvalid = errors.New("invalid qpack container")
)

// Error describes a problem with one file of a container: File is the
// container-relative path (for example "packed_experts/layout.json"), Key the
// JSON key, section or byte range concerned (may be empty).
type Error struct {
	File string
	Key  string
	Err  error
}

func (e *Error) Error() string {
	s := "qpack: " + e.File
	if e.Key != "" {
		s += ": " + e.Key
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// invalid is a bad-input error that wraps ErrInvalid.
type invalid struct{ msg string }

func (e *invalid) Error() string   { return e.msg }
func (e *invalid) Is(t error) bool { return t == ErrInvalid }

func errf(file, key, format string, args ...any) error {
	return &Error{File: file, Key: key, Err: &invalid{fmt.Sprintf(format, args...)}}
}

func wrapErr(file, key string, err error) error {
	var qe *Error
	if errors.As(err, &qe) {
		return err
	}
	return &Error{File: file, Key: key, Err: err}
}

// denseErr converts an error from the safetensors package about
// model.safetensors into an *Error (a format error wraps ErrInvalid).
func denseErr(err error) error {
	var fe *safetensors.FormatError
	if errors.As(err, &fe) {
		key := ""
		if fe.Tensor != "" {
			key = "tensor " + strconv.Quote(truncate(fe.Tensor, 200))
		}
		return &Error{File: DenseName, Key: key, Err: &invalid{fe.Msg}}
	}
	return wrapErr(DenseName, "", err)
}
