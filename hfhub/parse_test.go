package hfhub

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

const sha40 = "0123456789abcdef0123456789abcdef01234567"
const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseModelInfo(t *testing.T) {
	good := `{"id":"org/m","sha":"` + sha40 + `","private":true,"gated":"manual","siblings":[
		{"rfilename":"config.json","size":10,"blobId":"` + sha40 + `"},
		{"rfilename":"w.safetensors","size":5,"blobId":"` + sha40 + `","lfs":{"size":5,"sha256":"` + sha64 + `","pointerSize":130}}]}`
	mi, err := parseModelInfo("org/m", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if mi.SHA != sha40 || !mi.Private || mi.Gated != "manual" || len(mi.Siblings) != 2 ||
		mi.Siblings[1].LFS == nil || mi.Siblings[1].LFS.SHA256 != sha64 || mi.Siblings[1].ETag() != sha64 || mi.Siblings[0].ETag() != sha40 {
		t.Fatalf("parsed %+v", mi)
	}
	if mi, err := parseModelInfo("x", []byte(`{"id":"x","sha":"`+sha40+`","gated":false,"siblings":[{"rfilename":"a"}]}`)); err != nil || mi.Gated != "" || mi.Siblings[0].Size != -1 {
		t.Fatalf("minimal: %v %+v", err, mi)
	}
	bad := map[string]string{
		"not json":          `{"id":`,
		"no id":             `{"sha":"` + sha40 + `"}`,
		"null sha":          `{"id":"x","sha":null}`,
		"short sha":         `{"id":"x","sha":"abc"}`,
		"upper sha":         `{"id":"x","sha":"` + strings.ToUpper(sha40) + `"}`,
		"gated junk":        `{"id":"x","sha":"` + sha40 + `","gated":"sometimes"}`,
		"no rfilename":      `{"id":"x","sha":"` + sha40 + `","siblings":[{}]}`,
		"dotdot":            `{"id":"x","sha":"` + sha40 + `","siblings":[{"rfilename":"../../x"}]}`,
		"absolute":          `{"id":"x","sha":"` + sha40 + `","siblings":[{"rfilename":"/etc/passwd"}]}`,
		"duplicate":         `{"id":"x","sha":"` + sha40 + `","siblings":[{"rfilename":"a"},{"rfilename":"a"}]}`,
		"negative size":     `{"id":"x","sha":"` + sha40 + `","siblings":[{"rfilename":"a","size":-1}]}`,
		"huge size":         `{"id":"x","sha":"` + sha40 + `","siblings":[{"rfilename":"a","size":9007199254740993}]}`,
		"lfs without hash":  `{"id":"x","sha":"` + sha40 + `","siblings":[{"rfilename":"a","lfs":{"size":1,"pointerSize":1}}]}`,
		"lfs size mismatch": `{"id":"x","sha":"` + sha40 + `","siblings":[{"rfilename":"a","size":2,"lfs":{"size":1,"sha256":"` + sha64 + `","pointerSize":1}}]}`,
	}
	for name, body := range bad {
		if _, err := parseModelInfo("x", []byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseTreePage(t *testing.T) {
	body := `[{"type":"directory","oid":"` + sha40 + `","size":0,"path":"sub"},
	{"type":"file","oid":"` + sha40 + `","size":3,"path":"sub/a.txt"},
	{"type":"file","oid":"` + sha40 + `","size":7,"path":"w.bin","lfs":{"oid":"` + sha64 + `","size":7,"pointerSize":128}}]`
	fs, err := parseTreePage("r", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Path != "sub/a.txt" || fs[1].LFS == nil || fs[1].LFS.SHA256 != sha64 || fs[1].Size != 7 {
		t.Fatalf("parsed %+v", fs)
	}
	bad := map[string]string{
		"object not array": `{}`,
		"no oid":           `[{"type":"file","size":1,"path":"a"}]`,
		"no size":          `[{"type":"file","oid":"` + sha40 + `","path":"a"}]`,
		"unknown type":     `[{"type":"submodule","oid":"` + sha40 + `","size":0,"path":"a"}]`,
		"bad dir path":     `[{"type":"directory","oid":"` + sha40 + `","size":0,"path":"../a"}]`,
		"lfs short oid":    `[{"type":"file","oid":"` + sha40 + `","size":1,"path":"a","lfs":{"oid":"abc","size":1,"pointerSize":1}}]`,
		"lfs size differs": `[{"type":"file","oid":"` + sha40 + `","size":2,"path":"a","lfs":{"oid":"` + sha64 + `","size":1,"pointerSize":1}}]`,
	}
	for name, body := range bad {
		if _, err := parseTreePage("r", []byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	files := []FileInfo{{Path: "a"}, {Path: "a/b"}}
	if err := checkFileSet("r", files); err == nil {
		t.Error("a file that is also a directory was accepted")
	}
}

func TestParseContentRange(t *testing.T) {
	good := map[string]contentRange{
		"bytes 0-0/1":            {0, 0, 1, false},
		"bytes 10-19/100":        {10, 19, 100, false},
		"bytes 10-19/*":          {10, 19, -1, false},
		"bytes */100":            {0, 0, 100, true},
		"BYTES 5-5/6":            {5, 5, 6, false},
		"bytes 0-4294967296/5e9": {}, // placeholder replaced below
	}
	delete(good, "bytes 0-4294967296/5e9")
	good["bytes 0-4294967296/5000000000"] = contentRange{0, 4294967296, 5000000000, false}
	for h, want := range good {
		got, err := parseContentRange(h)
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", h, got, err, want)
		}
	}
	for _, h := range []string{"", "bytes", "bytes 1-2", "items 1-2/3", "bytes 2-1/3", "bytes 0-3/3", "bytes -1-2/3",
		"bytes 0-2/-3", "bytes +0-2/3", "bytes 0x1-2/3", "bytes */*", "bytes 0-99999999999999999999/1",
		"bytes 1 -2/3", strings.Repeat("9", 300)} {
		if _, err := parseContentRange(h); err == nil {
			t.Errorf("%q accepted", h)
		}
	}
}

func TestParseLinkNext(t *testing.T) {
	cases := map[string]string{
		`<https://h/api/x?cursor=a>; rel="next"`:               "https://h/api/x?cursor=a",
		`<https://h/1>; rel="prev", <https://h/3>; rel="next"`: "https://h/3",
		`<https://h/a,b>; title="x;y"; rel=next`:               "https://h/a,b",
		`<https://h/a>; rel="prev"`:                            "",
		``:                                                     "",
		`<https://h/a>; rel="first next"`:                      "https://h/a",
	}
	for h, want := range cases {
		got, err := parseLinkNext(h)
		if err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", h, got, err, want)
		}
	}
	for _, h := range []string{`https://h/a; rel="next"`, `<https://h/a`, strings.Repeat("<", 20000)} {
		if _, err := parseLinkNext(h); err == nil {
			t.Errorf("%q accepted", h)
		}
	}
}

func TestServerWaitAndBackoff(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{http.Header{"Retry-After": {now.Add(3 * time.Second).Format(http.TimeFormat)}}, 3 * time.Second, true},
		{http.Header{"Ratelimit": {`"resolvers";r=0;t=55`}}, 56 * time.Second, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{}, 0, false},
	}
	for _, tc := range cases {
		got, ok := serverWait(tc.h, now)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%v: got %v %v, want %v %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
	c := &Client{opts: Options{MaxRetryAfter: 10 * time.Second}}
	if d := c.backoff(time.Second, time.Minute, 0, &http.Response{Header: http.Header{"Retry-After": {"3600"}}}); d != 10*time.Second {
		t.Errorf("Retry-After not capped: %v", d)
	}
	for attempt := 0; attempt < 8; attempt++ {
		d := expBackoff(time.Second, 8*time.Second, attempt)
		base := min(time.Second<<attempt, 8*time.Second)
		if d < base/2 || d > base {
			t.Errorf("attempt %d: %v outside [%v, %v]", attempt, d, base/2, base)
		}
	}
}

func TestValidateRepoIDAndPath(t *testing.T) {
	for _, ok := range []string{"gpt2", "Qwen/Qwen3-Next-80B-A3B-Instruct", "mlx-community/Qwen3.5-35B-A3B-4bit", "a_b/c.d"} {
		if err := ValidateRepoID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b/c", "../x", "a--b/c", "a/b.git", "-a/b", "a/b ", "a%2Fb", "a/", "/a"} {
		if err := ValidateRepoID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, ok := range []string{"a", "a/b/c.safetensors", "odd name+#%ü.txt", ".gitattributes", "a..b"} {
		if err := ValidateRepoPath(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/a", "a/", "a//b", "..", "a/../b", "./a", `a\b`, "C:x", "a\x00", "a\nb", string([]byte{0xff}), strings.Repeat("a", 256)} {
		if err := ValidateRepoPath(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
