package hfhub

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Sentinel errors; a *HubError unwraps to one of them when the Hub said why.
var (
	ErrRepoNotFound     = errors.New("repository not found")
	ErrGatedRepo        = errors.New("gated repository")
	ErrRevisionNotFound = errors.New("revision not found")
	ErrEntryNotFound    = errors.New("file not found")
	ErrDisabledRepo     = errors.New("repository disabled")
	ErrUnauthorized     = errors.New("invalid credentials")
	ErrRateLimited      = errors.New("rate limited")
	ErrBadResponse      = errors.New("invalid response from the server")
	ErrHashMismatch     = errors.New("hash mismatch")
	ErrNotCached        = errors.New("not in the local cache")
	// ErrStalled: an attempt got no byte for Options.StallTimeout (see
	// StallError); it is retried, so it surfaces only once retries ran out.
	ErrStalled = errors.New("stalled")
	// ErrInvalidInput: a repository id or revision that cannot be valid,
	// refused before any request (a usage error: exit 2).
	ErrInvalidInput = errors.New("invalid input")
	// ErrLocalFileConflict: Download with LocalDir found a file qpack did
	// not create where it would write, with other content; it was left
	// unchanged (LocalFileError).
	ErrLocalFileConflict = errors.New("a file not created by qpack is in the way")
)

// inputError is a refused repository id or revision.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }
func (e *inputError) Unwrap() error { return ErrInvalidInput }

func badInput(format string, a ...any) error {
	return &inputError{msg: fmt.Sprintf(format, a...)}
}

// HubError is an HTTP error answered by the Hub (or its CDN), mapped from
// X-Error-Code and the status. Its message tells the user what to do.
type HubError struct {
	Status    int    // HTTP status
	Code      string // X-Error-Code, if any
	Message   string // X-Error-Message or the JSON {"error"} body, trimmed
	RequestID string // X-Request-Id, for bug reports
	Method    string
	URL       string // without query (signed URLs carry secrets)
	Repo      string
	Revision  string
	Path      string
	kind      error
}

func (e *HubError) Unwrap() error { return e.kind }

func (e *HubError) Error() string {
	var b strings.Builder
	switch e.kind {
	case ErrRepoNotFound:
		fmt.Fprintf(&b, "repository %q not found, or it is private/gated: check the name, and set HF_TOKEN (or --token) to a token that can read it", e.Repo)
	case ErrGatedRepo:
		if e.Status == http.StatusUnauthorized {
			fmt.Fprintf(&b, "repository %q is gated: accept its terms on the Hub, then set HF_TOKEN (or --token) to your token", e.Repo)
		} else {
			fmt.Fprintf(&b, "repository %q is gated and your token is not in its authorized list: request access on the Hub's page for it", e.Repo)
		}
	case ErrRevisionNotFound:
		fmt.Fprintf(&b, "revision %q not found in repository %q: check --revision (a branch, tag or 40-hex commit)", e.Revision, e.Repo)
	case ErrEntryNotFound:
		fmt.Fprintf(&b, "file %q not found in repository %q at revision %q", e.Path, e.Repo, e.Revision)
	case ErrDisabledRepo:
		fmt.Fprintf(&b, "repository %q has been disabled on the Hub", e.Repo)
	case ErrUnauthorized:
		b.WriteString("the Hub refused the token (invalid credentials): check HF_TOKEN, --token or the token file")
	case ErrRateLimited:
		b.WriteString("the Hub is rate limiting this client (HTTP 429): wait a few minutes and retry; a token raises the limits")
	default:
		fmt.Fprintf(&b, "%s %s: HTTP %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status))
	}
	if e.Message != "" && e.kind != nil {
		fmt.Fprintf(&b, " (Hub: %s)", e.Message)
	} else if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " [request id %s]", e.RequestID)
	}
	return b.String()
}

// classify picks the sentinel for a status and X-Error-Code, in the order the
// official client checks them.
func classify(status int, code, msg string, isHubURL bool) error {
	switch code {
	case "RevisionNotFound":
		return ErrRevisionNotFound
	case "EntryNotFound":
		return ErrEntryNotFound
	case "GatedRepo":
		return ErrGatedRepo
	case "RepoNotFound":
		return ErrRepoNotFound
	}
	if msg == "Access to this resource is disabled." {
		return ErrDisabledRepo
	}
	switch status {
	case http.StatusUnauthorized:
		if strings.Contains(msg, "Invalid credentials") || strings.Contains(msg, "Invalid username or password") {
			return ErrUnauthorized
		}
		if isHubURL {
			return ErrRepoNotFound
		}
	case http.StatusTooManyRequests:
		return ErrRateLimited
	}
	return nil
}

// sanitizeMessage keeps a server message short and printable.
func sanitizeMessage(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
