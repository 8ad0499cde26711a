package hfhub

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"testing"
)

// Seeds live in testdata/fuzz/FuzzXxx/; run with go test -fuzz=FuzzXxx.

func FuzzParseModelInfo(f *testing.F) {
	f.Add([]byte(`{"id":"org/m","sha":"` + sha40 + `","siblings":[{"rfilename":"a.json"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		mi, err := parseModelInfo("org/m", body)
		if err != nil {
			return
		}
		if !isCommit(mi.SHA) || mi.ID == "" {
			t.Fatalf("accepted bad id/sha: %+v", mi)
		}
		for _, s := range mi.Siblings {
			if ValidateRepoPath(s.Path) != nil {
				t.Fatalf("accepted path %q", s.Path)
			}
			if s.LFS != nil && (!isSHA256(s.LFS.SHA256) || s.LFS.Size < 0) {
				t.Fatalf("accepted lfs %+v", s.LFS)
			}
			if s.Size < -1 || s.Size > maxFileSize {
				t.Fatalf("accepted size %d", s.Size)
			}
		}
	})
}

func FuzzParseTreePage(f *testing.F) {
	f.Add([]byte(`[{"type":"file","oid":"` + sha40 + `","size":3,"path":"a/b.txt"}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		files, err := parseTreePage("org/m", body)
		if err != nil {
			return
		}
		for _, fi := range files {
			if ValidateRepoPath(fi.Path) != nil || !isSHA1(fi.BlobID) || fi.Size < 0 || fi.Size > maxFileSize {
				t.Fatalf("accepted %+v", fi)
			}
			if fi.LFS != nil && (!isSHA256(fi.LFS.SHA256) || fi.LFS.Size != fi.Size) {
				t.Fatalf("accepted lfs %+v", fi.LFS)
			}
		}
		_ = checkFileSet("org/m", files)
	})
}

func FuzzParseContentRange(f *testing.F) {
	f.Add("bytes 0-99/100")
	f.Fuzz(func(t *testing.T, h string) {
		cr, err := parseContentRange(h)
		if err != nil {
			return
		}
		if cr.Unsatisfied {
			if cr.Total < 0 {
				t.Fatalf("%q: unsatisfied without total", h)
			}
			return
		}
		if cr.First < 0 || cr.First > cr.Last || (cr.Total >= 0 && cr.Last >= cr.Total) {
			t.Fatalf("%q: accepted %+v", h, cr)
		}
		if cr.Last+1 <= 0 {
			t.Fatalf("%q: overflow", h)
		}
	})
}

func FuzzParseLinkNext(f *testing.F) {
	f.Add(`<https://huggingface.co/api/models/a/b/tree/main?cursor=x>; rel="next"`)
	f.Fuzz(func(t *testing.T, h string) {
		next, err := parseLinkNext(h)
		if err == nil && next != "" && len(next) > len(h) {
			t.Fatalf("%q: next %q longer than the header", h, next)
		}
	})
}

func FuzzMatchGlob(f *testing.F) {
	f.Add("*.safetensors", "model-00001-of-00002.safetensors")
	f.Fuzz(func(t *testing.T, pat, name string) {
		got := MatchGlob(pat, name)
		// A pattern without metacharacters matches exactly itself.
		plain := true
		for _, r := range pat {
			if r == '*' || r == '?' || r == '[' {
				plain = false
			}
		}
		if plain && got != (pat == name) {
			t.Fatalf("MatchGlob(%q, %q) = %v", pat, name, got)
		}
		if MatchGlob("*", name) != true {
			t.Fatal("* must match everything")
		}
	})
}

// FuzzResumeRecord feeds arbitrary bytes as a download's resume journal
// (<part>.json). An accepted record must describe a usable download (the
// bounds the downloader relies on to size its chunk table) and survive a
// round trip through the encoding the writer uses.
func FuzzResumeRecord(f *testing.F) {
	f.Add([]byte(`{"version":1,"etag":"` + sha40 + `","size":100,"chunk_size":16,"done":[0,3,6]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseResumeRecord("x.part.json", data)
		if err != nil {
			if r != nil {
				t.Fatal("record and error")
			}
			return
		}
		if r.Version != 1 || r.Size <= 0 || r.Size > maxFileSize || r.ChunkSize < 1 || r.ChunkSize > maxFileSize {
			t.Fatalf("accepted %+v", r)
		}
		n := (r.Size + r.ChunkSize - 1) / r.ChunkSize
		if n < 1 || n > maxChunks || int64(len(r.Done)) > n {
			t.Fatalf("accepted %d chunks (%d done): %+v", n, len(r.Done), r)
		}
		seen := map[int]bool{}
		for _, i := range r.Done {
			if i < 0 || int64(i) >= n || seen[i] {
				t.Fatalf("accepted done index %d of %d", i, n)
			}
			seen[i] = true
			// The downloader's arithmetic for a chunk's bytes.
			if off := int64(i) * r.ChunkSize; off < 0 || off >= r.Size {
				t.Fatalf("chunk %d starts at %d, size %d", i, off, r.Size)
			}
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := parseResumeRecord("again", b)
		if err != nil || !reflect.DeepEqual(normDone(r), normDone(r2)) {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", r, b, r2, err)
		}
	})
}

func normDone(r *resumeRecord) resumeRecord {
	c := *r
	if len(c.Done) == 0 {
		c.Done = nil
	}
	return c
}

// FuzzTreeCache feeds arbitrary bytes as a trees/<commit>.json file (the
// official client writes them too). An accepted listing must hold only
// valid, distinct, sorted paths with sane sizes and hashes, and survive a
// round trip through the writer's encoding.
func FuzzTreeCache(f *testing.F) {
	f.Add([]byte(`{"format_version":1,"files":{"a.json":{"size":3,"blob_id":"` + sha40 + `"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		files, err := parseTreeCache("trees/x.json", data)
		if err != nil {
			return
		}
		if !sort.SliceIsSorted(files, func(i, j int) bool { return files[i].Path < files[j].Path }) {
			t.Fatal("not sorted")
		}
		for i, fi := range files {
			if ValidateRepoPath(fi.Path) != nil || !isSHA1(fi.BlobID) || fi.Size < 0 || fi.Size > maxFileSize {
				t.Fatalf("accepted %+v", fi)
			}
			if fi.LFS != nil && (!isSHA256(fi.LFS.SHA256) || fi.LFS.Size != fi.Size) {
				t.Fatalf("accepted lfs %+v", fi.LFS)
			}
			if i > 0 && files[i-1].Path == fi.Path {
				t.Fatalf("duplicate %q", fi.Path)
			}
		}
		if files == nil {
			return // unknown format version: ignored
		}
		b, err := encodeTreeCache(files)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseTreeCache("again", b)
		if err != nil || !reflect.DeepEqual(files, again) {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", files, b, again, err)
		}
	})
}

// FuzzRangeVerdict: whatever a server sends, an answer is used only when it
// provably carries the bytes asked: partial content only with a
// Content-Range naming exactly them, a whole body only at offset 0 (or in
// the sequential fallback) with no conflicting length.
func FuzzRangeVerdict(f *testing.F) {
	f.Add(206, "bytes 100-199/1000", int64(100), int64(100), int64(100), int64(1000), false)
	f.Add(200, "", int64(1000), int64(0), int64(100), int64(1000), false)
	f.Add(200, "bytes 5-9/10", int64(-1), int64(5), int64(5), int64(10), true)
	f.Add(416, "bytes */10", int64(0), int64(0), int64(5), int64(10), false)
	f.Fuzz(func(t *testing.T, status int, cr string, cl, off, n, size int64, wholeOK bool) {
		if size <= 0 || size > maxFileSize || off < 0 || n <= 0 || off >= size || n > size-off {
			return
		}
		h := http.Header{}
		if cr != "" {
			h.Set("Content-Range", cr)
		}
		a, err := rangeVerdict(status, h, cl, off, n, size, wholeOK)
		if err != nil || a == nil {
			return
		}
		if status != 200 && status != 206 {
			t.Fatalf("status %d used", status)
		}
		if a.Whole {
			if cr != "" || status != 200 || (off > 0 && !wholeOK) || a.Skip != off || (cl >= 0 && cl != size) {
				t.Fatalf("whole body used: status %d CR %q CL %d off %d skip %d wholeOK %v", status, cr, cl, off, a.Skip, wholeOK)
			}
			return
		}
		c, perr := parseContentRange(h.Get("Content-Range"))
		if perr != nil || c.First != off || c.Last != off+n-1 || (c.Total >= 0 && c.Total != size) || (cl >= 0 && cl != n) || a.Skip != 0 {
			t.Fatalf("partial content used with CR %q CL %d for off %d n %d size %d", cr, cl, off, n, size)
		}
	})
}
