//go:build !unix

package hfhub

import "errors"

func mkfifo(string) error { return errors.ErrUnsupported }
