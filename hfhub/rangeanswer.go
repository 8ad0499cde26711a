package hfhub

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// errRangeIgnored: a server answered a Range starting after byte 0 with the
// whole file (RFC 9110 lets it). The file then falls back to one
// sequential stream (RemoteFile.readRanges); it is never retried as is.
var errRangeIgnored = errors.New("the server ignores Range requests at offsets after 0")

// rangeAnswer is what the client may do with an answer to "Range: bytes=
// off-(off+n-1)" of a size-byte file.
type rangeAnswer struct {
	// Skip is how many body bytes precede byte off (0 for partial content;
	// off for a whole-file body, which only a sequential fallback accepts
	// when off > 0). The caller reads exactly n bytes after them.
	Skip int64
	// Whole: the body is the whole file (a 200 without Content-Range).
	Whole bool
}

// rangeVerdict decides, from the status and headers alone, whether an
// answer to a range request is provably the bytes asked for (RFC 9110
// §14/§15.3.7). contentLength is -1 when absent. wholeOK says a whole-file
// body may be used at off > 0 by skipping off bytes (the sequential
// fallback); at off == 0 one always is (what is needed is read, the rest
// dropped).
//
//   - 206 or 200 with a Content-Range: partial content; the Content-Range
//     must be exactly [off, off+n-1] of size (total "*" allowed), a
//     Content-Length, if any, n. Anything else is a retryable error.
//   - 206 without Content-Range (or multipart): a retryable error.
//   - 200 without Content-Range: the whole file; its Content-Length, if
//     any, must be size. Used at off == 0 or with wholeOK, else
//     errRangeIgnored.
//   - 416: the file on the server is not the size the Hub listed (not
//     retried). Other statuses are left to the caller (nil answer, nil error).
//
// A non-identity Content-Encoding is a retryable error: the bytes would
// not be the file's.
func rangeVerdict(status int, h http.Header, contentLength, off, n, size int64, wholeOK bool) (*rangeAnswer, error) {
	want := statusRange(off, n)[len("bytes="):]
	bad := func(format string, a ...any) error {
		return &protocolError{retryable: true, msg: fmt.Sprintf("(Range: bytes=%s): ", want) + fmt.Sprintf(format, a...)}
	}
	switch status {
	case http.StatusPartialContent, http.StatusOK:
	case http.StatusRequestedRangeNotSatisfiable:
		return nil, &protocolError{msg: fmt.Sprintf("HTTP 416 for bytes=%s of a %d-byte file (Content-Range %.60q): the file on the server is not the size the Hub listed", want, size, h.Get("Content-Range"))}
	default:
		return nil, nil
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, bad("Content-Encoding %.40q", ce)
	}
	if ct := h.Get("Content-Type"); strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "multipart/") {
		return nil, bad("multipart response")
	}
	crh := h.Get("Content-Range")
	if crh != "" {
		cr, err := parseContentRange(crh)
		if err != nil {
			return nil, bad("%v", err)
		}
		if cr.Unsatisfied || cr.First != off || cr.Last != off+n-1 {
			return nil, bad("HTTP %d with Content-Range %.60q, not the range asked for", status, crh)
		}
		if cr.Total >= 0 && cr.Total != size {
			return nil, bad("Content-Range %.60q: total %d, expected the file size %d", crh, cr.Total, size)
		}
		if contentLength >= 0 && contentLength != n {
			return nil, bad("Content-Length %d, expected %d", contentLength, n)
		}
		return &rangeAnswer{}, nil
	}
	if status == http.StatusPartialContent {
		return nil, bad("206 without Content-Range")
	}
	// 200 without Content-Range: the whole representation.
	if contentLength >= 0 && contentLength != size {
		return nil, bad("HTTP 200 without Content-Range whose Content-Length %d is not the file size %d", contentLength, size)
	}
	if off == 0 || wholeOK {
		return &rangeAnswer{Skip: off, Whole: true}, nil
	}
	return nil, errRangeIgnored
}
