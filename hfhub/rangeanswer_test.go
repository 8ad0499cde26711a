package hfhub

import (
	"errors"
	"net/http"
	"testing"
)

// TestRangeAnswerConformance is the table of every (status, Content-Range,
// Content-Length, body kind) a server can send to "Range: bytes=100-199"
// of a 1000-byte file (and to a range at offset 0), and what the client
// does with it. The expected outcomes are written from RFC 9110 §14 and
// §15.3.7, not from the implementation.
func TestRangeAnswerConformance(t *testing.T) {
	const size = 1000
	type outcome int
	const (
		use      outcome = iota // partial content: the body is the bytes asked for
		useWhole                // the whole file: skip Skip bytes, read n
		retry                   // retryable protocol error, bytes never used
		fallback                // errRangeIgnored: read the file as one sequential stream
		fatal                   // not retried (416)
		other                   // not a range answer: the caller maps the status (HubError)
	)
	cases := []struct {
		name     string
		status   int
		cr       string
		cl       int64 // -1: no Content-Length
		ce, ct   string
		off, n   int64
		wholeOK  bool
		want     outcome
		wantSkip int64
	}{
		{"206 exact", 206, "bytes 100-199/1000", 100, "", "", 100, 100, false, use, 0},
		{"206 exact, chunked", 206, "bytes 100-199/1000", -1, "", "", 100, 100, false, use, 0},
		{"206 exact, total unknown", 206, "bytes 100-199/*", 100, "", "", 100, 100, false, use, 0},
		{"206 other offset", 206, "bytes 90-189/1000", 100, "", "", 100, 100, false, retry, 0},
		{"206 shorter", 206, "bytes 100-149/1000", 50, "", "", 100, 100, false, retry, 0},
		{"206 longer", 206, "bytes 100-299/1000", 200, "", "", 100, 100, false, retry, 0},
		{"206 other total", 206, "bytes 100-199/2000", 100, "", "", 100, 100, false, retry, 0},
		{"206 wrong Content-Length", 206, "bytes 100-199/1000", 101, "", "", 100, 100, false, retry, 0},
		{"206 without Content-Range", 206, "", 100, "", "", 100, 100, false, retry, 0},
		{"206 unsatisfied form", 206, "bytes */1000", 0, "", "", 100, 100, false, retry, 0},
		{"206 malformed Content-Range", 206, "bytes 100-199", 100, "", "", 100, 100, false, retry, 0},
		{"206 other unit", 206, "items 100-199/1000", 100, "", "", 100, 100, false, retry, 0},
		{"206 gzip", 206, "bytes 100-199/1000", 100, "gzip", "", 100, 100, false, retry, 0},
		{"206 multipart", 206, "", -1, "", "multipart/byteranges; boundary=x", 100, 100, false, retry, 0},
		{"200 with the exact Content-Range (ModelScope)", 200, "bytes 100-199/1000", 100, "", "", 100, 100, false, use, 0},
		{"200 with another Content-Range", 200, "bytes 0-999/1000", 1000, "", "", 100, 100, false, retry, 0},
		{"200 whole file at offset 0", 200, "", 1000, "", "", 0, 100, false, useWhole, 0},
		{"200 whole file at offset 0, chunked", 200, "", -1, "", "", 0, 100, false, useWhole, 0},
		{"200 whole file for the whole file", 200, "", 1000, "", "", 0, 1000, false, useWhole, 0},
		{"200 of another length at offset 0", 200, "", 999, "", "", 0, 100, false, retry, 0},
		{"200 whole file at a later offset", 200, "", 1000, "", "", 100, 100, false, fallback, 0},
		{"200 whole file at a later offset, chunked", 200, "", -1, "", "", 100, 100, false, fallback, 0},
		{"200 whole file at a later offset, sequential", 200, "", 1000, "", "", 100, 100, true, useWhole, 100},
		{"200 of another length at a later offset", 200, "", 500, "", "", 100, 100, true, retry, 0},
		{"200 gzip", 200, "", -1, "gzip", "", 0, 100, false, retry, 0},
		{"416", 416, "bytes */1000", 0, "", "", 100, 100, false, fatal, 0},
		{"416 other size", 416, "bytes */900", 0, "", "", 100, 100, false, fatal, 0},
		{"404", 404, "", 10, "", "", 100, 100, false, other, 0},
		{"503", 503, "", 10, "", "", 100, 100, false, other, 0},
		{"304", 304, "", -1, "", "", 100, 100, false, other, 0},
	}
	for _, tc := range cases {
		h := http.Header{}
		if tc.cr != "" {
			h.Set("Content-Range", tc.cr)
		}
		if tc.ce != "" {
			h.Set("Content-Encoding", tc.ce)
		}
		if tc.ct != "" {
			h.Set("Content-Type", tc.ct)
		}
		a, err := rangeVerdict(tc.status, h, tc.cl, tc.off, tc.n, size, tc.wholeOK)
		var got outcome
		var pe *protocolError
		switch {
		case err == nil && a == nil:
			got = other
		case err == nil && !a.Whole:
			got = use
		case err == nil:
			got = useWhole
		case errors.Is(err, errRangeIgnored):
			got = fallback
		case errors.As(err, &pe) && pe.retryable:
			got = retry
		case errors.As(err, &pe):
			got = fatal
		default:
			t.Errorf("%s: unexpected error type %T %v", tc.name, err, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: outcome %d, want %d (err %v)", tc.name, got, tc.want, err)
			continue
		}
		if a != nil && a.Skip != tc.wantSkip {
			t.Errorf("%s: skip %d, want %d", tc.name, a.Skip, tc.wantSkip)
		}
		if err != nil && errors.Is(err, errRangeIgnored) == false && !errors.Is(err, ErrBadResponse) {
			t.Errorf("%s: error %v does not unwrap to ErrBadResponse", tc.name, err)
		}
	}
}
