package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// recordedOffline is the output of testdata/hubcheck/offline.sh as run on
// the device machine with huggingface_hub 1.33.
const recordedOffline = "../../testdata/hubcheck/recorded-offline"

// The recorded offline / partial-cache check is complete and consistent
// with the checkpoint it served: every step passed against
// huggingface_hub 1.33; the offline container names the commit of the
// snapshot the official client wrote; the request log of the partial run
// shows exactly the bytes of the two files removed from the cache (plus
// the removed shard's header, read once before it streams), computed here
// from the bundled checkpoint.
func TestRecordedOfflineCheck(t *testing.T) {
	summary, err := os.ReadFile(filepath.Join(recordedOffline, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(summary)), "\n")
	if !strings.Contains(lines[0], "huggingface_hub 1.33") {
		t.Fatalf("not a run against huggingface_hub 1.33: %s", lines[0])
	}
	passes := 0
	for _, l := range lines[1 : len(lines)-1] {
		switch {
		case strings.HasPrefix(l, "PASS "):
			passes++
		case strings.HasPrefix(l, "# "):
		default:
			t.Errorf("summary line %q", l)
		}
	}
	if want := regexp.MustCompile(`^(\d+) passed, 0 failed$`); !want.MatchString(lines[len(lines)-1]) || passes != 9 {
		t.Fatalf("%d PASS lines, last line %q", passes, lines[len(lines)-1])
	}
	for _, step := range []string{"snapshot_download filled the cache", "HF_HUB_OFFLINE=1 repack --from-hf", "byte-identical to --from-dir",
		"verify-install --deep --source REPO", "exit 2 naming it", "only the files missing from the cache were fetched", "the cache was not written"} {
		if !regexp.MustCompile(`(?m)^PASS .*` + regexp.QuoteMeta(step)).Match(summary) {
			t.Errorf("no PASS for %q", step)
		}
	}

	// The offline repack: the snapshot's commit, every shard verified. The
	// recording predates the snake_case keys: both spellings are read.
	type recordedResult struct {
		Commit       string `json:"commit"`
		OutputBytes  int64  `json:"outputBytes"`
		OutputBytes2 int64  `json:"output_bytes"`
		Shards       []struct {
			Name     string `json:"name"`
			SHA256   string `json:"sha256"`
			Verified bool   `json:"verified"`
		} `json:"shards"`
	}
	var off, part recordedResult
	for p, r := range map[string]*recordedResult{"repack-offline.json": &off, "repack-partial.json": &part} {
		data, err := os.ReadFile(filepath.Join(recordedOffline, p))
		if err != nil {
			t.Fatal(err)
		}
		// Recorded before --json switched to snake_case keys: read either.
		if err := json.Unmarshal(snakeKeys(t, data), r); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		r.OutputBytes += r.OutputBytes2
		if len(r.Shards) != 3 {
			t.Fatalf("%s: %d shards", p, len(r.Shards))
		}
		for _, s := range r.Shards {
			if !s.Verified || s.SHA256 != fileSHA(t, filepath.Join(srcTiny, s.Name)) {
				t.Errorf("%s: shard %+v", p, s)
			}
		}
	}
	layout, err := os.ReadFile(filepath.Join(recordedOffline, "layout-c1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(layout), "/snapshots/"+off.Commit+"/model-00001-of-00003.safetensors -> ../../blobs/") {
		t.Errorf("the offline repack's commit %s is not the cached snapshot's", off.Commit)
	}
	if off.OutputBytes != part.OutputBytes || off.OutputBytes == 0 {
		t.Errorf("output bytes %d and %d", off.OutputBytes, part.OutputBytes)
	}

	// The partial run's log.
	f, err := os.Open(filepath.Join(recordedOffline, "hub-requests-partial.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Method, File string
			BodyBytes    int64
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Method == "GET" && r.File != "" {
			got[r.File] += r.BodyBytes
		}
	}
	want := map[string]int64{
		"model-00002-of-00003.safetensors": fileSize(t, filepath.Join(srcTiny, "model-00002-of-00003.safetensors")) + headerLen(t, filepath.Join(srcTiny, "model-00002-of-00003.safetensors")),
		"tokenizer.json":                   fileSize(t, filepath.Join(srcTiny, "tokenizer.json")),
	}
	if len(got) != len(want) || got["tokenizer.json"] != want["tokenizer.json"] || got["model-00002-of-00003.safetensors"] != want["model-00002-of-00003.safetensors"] {
		t.Fatalf("fetched %v, want %v", got, want)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// headerLen is 8 + the header JSON length of a safetensors file.
func headerLen(t *testing.T, p string) int64 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	return 8 + int64(binary.LittleEndian.Uint64(b[:]))
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// snakeKeys rewrites the object keys of a JSON document from camelCase to
// snake_case ("outputBytes" -> "output_bytes"); snake_case keys stay.
func snakeKeys(t *testing.T, data []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var conv func(any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			m := make(map[string]any, len(x))
			for k, e := range x {
				var b strings.Builder
				for i, r := range k {
					if r >= 'A' && r <= 'Z' {
						if i > 0 {
							b.WriteByte('_')
						}
						r += 'a' - 'A'
					}
					b.WriteRune(r)
				}
				m[b.String()] = conv(e)
			}
			return m
		case []any:
			for i := range x {
				x[i] = conv(x[i])
			}
		}
		return v
	}
	out, err := json.Marshal(conv(v))
	if err != nil {
		t.Fatal(err)
	}
	return out
}
