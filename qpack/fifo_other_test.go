//go:build !unix

package qpack

import "errors"

func mkfifo(path string) error { return errors.New("not supported") }
