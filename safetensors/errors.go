package safetensors

import (
	"strconv"
	"strings"
)

// FormatError reports a malformed file: a header, an index or a tensor that
// breaks the format's rules. Every error this package returns about bad
// input is a *FormatError; I/O errors are wrapped with the file name.
type FormatError struct {
	File   string // the file, as given to the reader
	Tensor string // the tensor concerned, "" when none
	Msg    string
}

func (e *FormatError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Tensor != "" {
		b.WriteString("tensor ")
		b.WriteString(quoteTrunc(e.Tensor))
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func formatErr(file, tensor, msg string) *FormatError {
	return &FormatError{File: file, Tensor: tensor, Msg: msg}
}

// maxQuoted bounds how much of an untrusted string goes into an error
// message.
const maxQuoted = 200

// quoteTrunc quotes s for an error message, cutting it short if it is long.
func quoteTrunc(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..." + "(" + strconv.Itoa(len(s)) + " bytes)"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
