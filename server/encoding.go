package server

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// decodeContent undoes the request's Content-Encoding (RFC 9110 §8.4):
// identity, or gzip (what some HTTP clients send for large prompts),
// decompressed with the same bound as a plain body. Any other coding is a
// 415 naming it, as §15.5.16 says; a gzip body that does not decompress is
// a 400.
func decodeContent(r *http.Request, body []byte, limit int64) ([]byte, *APIError) {
	codings := strings.TrimSpace(r.Header.Get("Content-Encoding"))
	if codings == "" {
		return body, nil
	}
	// A list is applied in order; undo it from the last.
	parts := strings.Split(codings, ",")
	for i := len(parts) - 1; i >= 0; i-- {
		switch c := strings.ToLower(strings.TrimSpace(parts[i])); c {
		case "identity", "":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				return nil, badRequest("", "the request body is not gzip data (Content-Encoding: %s): %v", codings, err)
			}
			out, err := io.ReadAll(io.LimitReader(zr, limit+1))
			if err == nil {
				err = zr.Close()
			}
			if err != nil {
				return nil, badRequest("", "decompressing the request body (Content-Encoding: %s): %v", codings, err)
			}
			if int64(len(out)) > limit {
				return nil, tooLarge(limit)
			}
			body = out
		default:
			return nil, unsupportedEncoding(codings)
		}
	}
	return body, nil
}

func unsupportedEncoding(codings string) *APIError {
	return &APIError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_content_encoding",
		Message: fmt.Sprintf("Content-Encoding %q is not supported: send the body as is (identity) or gzip", codings)}
}
