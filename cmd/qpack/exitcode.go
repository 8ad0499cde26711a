package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/qpack-go/qpack/cuda"
	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// Exit codes, the same for every command.
const (
	exitOK        = 0
	exitFailure   = 1   // a failure during the work
	exitUsage     = 2   // usage, not found, gated, bad token, bad input
	exitInterrupt = 130 // SIGINT or SIGTERM
)

// resumeHint is what an interrupted resumable command says.
const resumeHint = "interrupted; run the same command again to resume"

// exitError carries a specific process exit code (verify-install uses 1 for
// a bad container and 2 for unusable input). A silent one is not printed
// by main: the command has already shown it (in a report on stdout).
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// silentCode is withCode for an error the command has already reported.
func silentCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err, silent: true}
}

// interruptedError is a command stopped by a signal. Its message is one
// line: the resume hint for commands that resume, else "interrupted".
type interruptedError struct {
	err       error
	resumable bool
}

func (e *interruptedError) Error() string {
	if e.resumable {
		return resumeHint
	}
	return "interrupted"
}

func (e *interruptedError) Unwrap() error { return e.err }

// resumable lists the commands whose interrupted work a rerun continues.
var resumable = map[string]bool{"download": true, "repack": true, "verify-install": true}

// inputErrors are the failures that mean the input is wrong (exit 2), not
// that the work failed.
var inputErrors = []error{
	hfhub.ErrRepoNotFound, hfhub.ErrGatedRepo, hfhub.ErrRevisionNotFound,
	hfhub.ErrEntryNotFound, hfhub.ErrDisabledRepo, hfhub.ErrUnauthorized,
	hfhub.ErrNotCached, hfhub.ErrInvalidInput, hfhub.ErrLocalFileConflict, fs.ErrNotExist,
	qpack.ErrNotContainer, qpack.ErrUnsupportedVersion, qpack.ErrInvalid,
	modelconfig.ErrConfig,
}

// exitCode maps err to the process exit code: an exitError's own code, 130
// for an interrupt, 2 for bad input, else 1.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ie *interruptedError
	if errors.As(err, &ie) {
		return exitInterrupt
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, context.Canceled) {
		return exitInterrupt
	}
	if errors.Is(err, hfhub.ErrBadResponse) || errors.Is(err, hfhub.ErrHashMismatch) {
		return exitFailure // the server or the network failed, not the input
	}
	for _, e := range inputErrors {
		if errors.Is(err, e) {
			return exitUsage
		}
	}
	if isBadInput(err) {
		return exitUsage
	}
	return exitFailure
}

// isBadInput reports errors that describe a malformed input file: a
// safetensors file, a container, a JSON file.
func isBadInput(err error) bool {
	var fe *safetensors.FormatError
	var qe *qpack.Error
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.As(err, &fe) || errors.As(err, &qe) || errors.As(err, &se) || errors.As(err, &te)
}

// exitStatus prints err on w (unless it is silent) and returns its exit
// code.
func exitStatus(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) || !ee.silent {
		fmt.Fprintln(w, "qpack:", dedupeMessage(err.Error()))
		if errors.Is(err, cuda.ErrOutOfMemory) {
			fmt.Fprintln(w, "qpack:", gpuMemoryHint)
		}
	}
	return exitCode(err)
}

// gpuMemoryHint follows an error whose cause is the GPU's memory running
// out: what takes it, and the flags that make it smaller.
var gpuMemoryHint = fmt.Sprintf("the GPU ran out of memory: its expert cache takes half the free memory by default "+
	"(--gpu-expert-cache sets it, 0 turns it off) and each prefill pass needs room for its tokens "+
	"(--prefill-chunk; %d by default on a GPU, %d for serve)", gpuPrefillChunk, gpuServePrefillChunk)

// dedupeMessage drops a prefix repeated by wrapping ("config.json:
// config.json: x" → "config.json: x"), so each name appears once.
func dedupeMessage(s string) string {
	parts := strings.Split(s, ": ")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		if i > 0 && p == parts[i-1] {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}
