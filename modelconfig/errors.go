package modelconfig

import (
	"errors"
	"fmt"
	"strings"
)

// ErrConfig is wrapped by every error this package returns for a config
// that is malformed, inconsistent or outside the bounds: the input's fault
// (a CLI maps it to exit status 2).
var ErrConfig = errors.New("unusable model config")

// ErrUnsupported is wrapped (besides ErrConfig) by the error for an
// architecture no registered parser handles.
var ErrUnsupported = errors.New("unsupported architecture")

// Error is one problem of a config file, at one field.
type Error struct {
	File  string // the file, as the caller named it ("config.json", a path)
	Field string // the JSON path of the field ("text_config.hidden_size"); "" for the whole file
	Msg   string
	// Supported lists the registered model types when the problem is an
	// unsupported architecture.
	Supported []string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if len(e.Supported) > 0 {
		fmt.Fprintf(&b, " (supported: %s)", strings.Join(e.Supported, ", "))
	}
	return b.String()
}

// Is makes errors.Is(err, ErrConfig) true for every Error, and
// errors.Is(err, ErrUnsupported) for an unsupported architecture.
func (e *Error) Is(target error) bool {
	return target == ErrConfig || (target == ErrUnsupported && len(e.Supported) > 0)
}

// ErrorList is every problem found in one config, in the order found (a
// parse goes on after the first problem, like go/types, so one run names
// them all).
type ErrorList []*Error

func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	var b strings.Builder
	if f := l[0].File; f != "" {
		fmt.Fprintf(&b, "%s: %d problems: ", f, len(l))
	} else {
		fmt.Fprintf(&b, "%d problems: ", len(l))
	}
	for i, e := range l {
		if i > 0 {
			b.WriteString("; ")
		}
		c := *e
		c.File = ""
		b.WriteString(c.Error())
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As each problem.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Is makes errors.Is(err, ErrConfig) true for any non-empty list.
func (l ErrorList) Is(target error) bool { return target == ErrConfig && len(l) > 0 }

// problems collects a parse's errors.
type problems struct {
	file string
	list ErrorList
}

func (p *problems) add(field, format string, args ...any) {
	p.list = append(p.list, &Error{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return p.list
}
