package hfhub

import (
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
