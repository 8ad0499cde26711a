package server

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"
)

func gz(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A gzip body is decompressed within the same bound as a plain one; an
// unsupported coding is a 415 that says what is accepted.
func TestHTTPContentEncoding(t *testing.T) {
	_, ts := newTiny(t, Config{MaxBody: 4096}, 0)
	url := ts.URL + "/v1/chat/completions"
	body := `{"max_tokens":2,` + hi + `}`
	for _, enc := range []string{"gzip", "GZIP", "x-gzip", "identity, gzip"} {
		res, data := post(t, url, gz(t, body), "Content-Encoding", enc, "Content-Type", "application/json")
		if res.StatusCode != http.StatusOK || !strings.Contains(string(data), `"chat.completion"`) {
			t.Fatalf("Content-Encoding %s: %d %s", enc, res.StatusCode, data)
		}
	}
	res, data := post(t, url, body, "Content-Encoding", "identity")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("identity: %d %s", res.StatusCode, data)
	}
	res, data = post(t, url, body, "Content-Encoding", "br")
	wantError(t, res, data, http.StatusUnsupportedMediaType, "")
	if got := res.Header.Get("Accept-Encoding"); !strings.Contains(got, "gzip") {
		t.Fatalf("415 without Accept-Encoding: %q", got)
	}
	res, data = post(t, url, body, "Content-Encoding", "gzip") // says gzip, is not
	wantError(t, res, data, http.StatusBadRequest, "")
	// A small gzip body that inflates past MaxBody is a 413, not a 400.
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 20000) + `"}]}`
	res, data = post(t, url, gz(t, big), "Content-Encoding", "gzip")
	wantError(t, res, data, http.StatusRequestEntityTooLarge, "")
}
