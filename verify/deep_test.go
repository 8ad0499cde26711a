package verify

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

func deepRun(t *testing.T, f *fixture, o Options, sample int) *Report {
	t.Helper()
	src, err := OpenDirSource(f.src)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	o.Deep = &DeepOptions{Source: src, Sample: sample, Seed: 7, BlockSize: 100 << 10}
	return run(t, f.dir, o)
}

// sourceTensor finds a checkpoint tensor by name, with the shard file.
func sourceTensor(t *testing.T, f *fixture, name string) (string, safetensors.Tensor) {
	t.Helper()
	for _, s := range f.ckptShard {
		h, err := safetensors.ReadFileHeader(filepath.Join(f.src, s))
		if err != nil {
			t.Fatal(err)
		}
		if tt, ok := h.Tensor(name); ok {
			return s, tt
		}
	}
	t.Fatalf("no tensor %s in the checkpoint", name)
	return "", safetensors.Tensor{}
}

func TestDeepIntact(t *testing.T) {
	for _, ck := range []string{next, "qwen3_5_moe-q4g32", "qwen3_next-f32"} {
		t.Run(ck, func(t *testing.T) {
			f := newFixture(t, ck)
			r := deepRun(t, f, Options{}, 0)
			wantStatus(t, r, StatusOK)
			d := r.Deep
			l := f.layout
			if d.ExpertSlices != l.LayerCount*l.ExpertCount*len(l.Sections) || d.DenseTensors != len(f.dense.Tensors) {
				t.Fatalf("compared %d slices, %d dense tensors\n%s", d.ExpertSlices, d.DenseTensors, dump(r))
			}
			var want int64 = int64(l.LayerCount) * int64(l.ExpertCount) * l.Payload()
			want += f.dense.DataSize()
			if d.BytesCompared != want {
				t.Fatalf("compared %d bytes, want %d", d.BytesCompared, want)
			}
			var srcBytes int64
			for i, s := range d.Shards {
				st, _ := os.Stat(filepath.Join(f.src, s.Name))
				srcBytes += st.Size()
				// The repack recorded each shard's sha256; the stream
				// checked it.
				if s.Status != "ok" || s.SHA256 != f.manifest.Ext.Source.Shards[i].SHA256 {
					t.Fatalf("shard %+v", s)
				}
			}
			if d.SourceBytesRead != srcBytes {
				t.Fatalf("read %d source bytes, the shards hold %d", d.SourceBytesRead, srcBytes)
			}
		})
	}
}

func TestDeepNamesSection(t *testing.T) {
	f := newFixture(t, next)
	l := f.layout
	for _, tc := range []struct {
		layer, expert int
		section       string
		at            int64
	}{
		{3, 5, "up_proj.scales", 7},
		{0, 0, "gate_proj.weight", 0},
		{7, 7, "down_proj.biases", 127},
	} {
		sec, _ := l.Section(tc.section)
		off := int64(tc.expert)*l.ExpertStride + sec.Offset + tc.at
		undo := flip(t, f.dir, qpack.LayerFile(tc.layer), off, 0x80)
		r := deepRun(t, f, Options{}, 0)
		undo()
		wantStatus(t, r, StatusDamaged)
		onlyFile(t, r, qpack.LayerFile(tc.layer))
		hit := find(r, func(p Problem) bool {
			return p.Kind == KindMismatch && is(p.Layer, tc.layer) && is(p.Expert, tc.expert) && p.Section == tc.section && *p.Offset == off
		})
		if len(hit) != 1 || !strings.Contains(hit[0].Tensor, "layers."+strconv.Itoa(tc.layer)+".mlp.switch_mlp."+tc.section) {
			t.Fatalf("%+v\n%s", tc, dump(r))
		}
		if len(find(r, func(p Problem) bool { return p.Kind == KindMismatch })) != 1 {
			t.Fatalf("more than one mismatch\n%s", dump(r))
		}
	}
	// A dense tensor.
	tt := f.dense.Tensors[len(f.dense.Tensors)/2]
	undo := flip(t, f.dir, qpack.DenseName, tt.Offset+3, 1)
	r := deepRun(t, f, Options{}, 0)
	undo()
	wantStatus(t, r, StatusDamaged)
	hit := find(r, func(p Problem) bool { return p.Kind == KindMismatch && p.Tensor == tt.Name && *p.Offset == tt.Offset+3 })
	if len(hit) != 1 || len(find(r, func(p Problem) bool { return p.Kind == KindDigest && p.File == qpack.DenseName })) != 1 {
		t.Fatal(dump(r))
	}
}

func TestDeepSwappedExperts(t *testing.T) {
	f := newFixture(t, next)
	swapExperts(t, f, 2, 0, 3)
	r := deepRun(t, f, Options{}, 0)
	wantStatus(t, r, StatusDamaged)
	mism := find(r, func(p Problem) bool { return p.Kind == KindMismatch })
	bySlice := map[[2]int]int{}
	for _, p := range mism {
		if !is(p.Layer, 2) || p.Expert == nil || (*p.Expert != 0 && *p.Expert != 3) || p.Section == "" {
			t.Fatalf("unexpected %s", p)
		}
		bySlice[[2]int{*p.Layer, *p.Expert}]++
	}
	// Random weights: every section of both experts differs.
	if bySlice[[2]int{2, 0}] != len(f.layout.Sections) || bySlice[[2]int{2, 3}] != len(f.layout.Sections) {
		t.Fatalf("%v\n%s", bySlice, dump(r))
	}
	if len(find(r, func(p Problem) bool { return p.Kind == KindExpertDigest })) != 2 {
		t.Fatal(dump(r))
	}
}

// A same-size corruption of a source shard is caught by its hash, and the
// differences it causes are blamed on the source, not the container.
func TestDeepCorruptLocalSource(t *testing.T) {
	f := newFixture(t, next)
	name := "model.layers.1.mlp.switch_mlp.down_proj.weight"
	shard, tt := sourceTensor(t, f, name)
	flip(t, f.src, shard, tt.Offset+10, 4)
	r := deepRun(t, f, Options{}, 0)
	wantStatus(t, r, StatusUnusable)
	if r.ExitCode() != 2 || len(r.ContainerProblems()) != 0 {
		t.Fatal(dump(r))
	}
	if got := find(r, func(p Problem) bool { return p.Kind == KindSourceHash && p.File == shard }); len(got) != 1 || !strings.Contains(got[0].Message, qpack.ManifestName) {
		t.Fatal(dump(r))
	}
	if got := find(r, func(p Problem) bool {
		return p.Kind == KindMismatch && p.Scope == ScopeSource && p.Tensor == name && is(p.Layer, 1) && is(p.Expert, 0)
	}); len(got) != 1 {
		t.Fatal(dump(r))
	}
	// A corruption outside every copied tensor (the header's padding is
	// not copied) is caught by the hash alone.
	f2 := newFixture(t, next)
	h, err := safetensors.ReadFileHeader(filepath.Join(f2.src, f2.ckptShard[0]))
	if err != nil {
		t.Fatal(err)
	}
	// Replace one byte of a string in the header JSON with one of the same
	// meaning: the key order within "dtype" stays, so find a space.
	data := must(os.ReadFile(filepath.Join(f2.src, f2.ckptShard[0])))
	i := strings.LastIndex(string(data[8:h.DataStart]), " ")
	if i < 0 {
		t.Skip("no padding in the header")
	}
	data[8+i] = '\t'
	os.WriteFile(filepath.Join(f2.src, f2.ckptShard[0]), data, 0o644)
	r = deepRun(t, f2, Options{}, 0)
	wantStatus(t, r, StatusUnusable)
	if len(find(r, func(p Problem) bool { return p.Kind == KindSourceHash })) != 1 || len(find(r, func(p Problem) bool { return p.Kind == KindMismatch })) != 0 {
		t.Fatal(dump(r))
	}
}

func TestDeepWrongSource(t *testing.T) {
	f := newFixture(t, next)
	other := filepath.Join(t.TempDir(), "other")
	copyDir(t, tinyDir("qwen3_next-q8g32"), other)
	src, err := OpenDirSource(other)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r := run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
	wantStatus(t, r, StatusUnusable)
	if len(find(r, func(p Problem) bool { return p.Kind == KindSource })) == 0 {
		t.Fatal(dump(r))
	}
}

func TestDeepNoDigests(t *testing.T) {
	f := newFixture(t, next)
	stripExtension(t, f.dir)
	sec, _ := f.layout.Section("gate_proj.scales")
	off := 4*f.layout.ExpertStride + sec.Offset + 1
	flip(t, f.dir, qpack.LayerFile(5), off, 2)
	if r := run(t, f.dir, Options{}); r.Status != StatusOK {
		t.Fatalf("without digests a changed section cannot be seen by the fast check: %s", dump(r))
	}
	r := deepRun(t, f, Options{}, 0)
	wantStatus(t, r, StatusDamaged)
	hit := find(r, func(p Problem) bool {
		return p.Kind == KindMismatch && is(p.Layer, 5) && is(p.Expert, 4) && p.Section == "gate_proj.scales" && *p.Offset == off
	})
	if len(hit) != 1 || !strings.Contains(hit[0].Message, "could not be checked") {
		t.Fatal(dump(r))
	}
	for _, s := range r.Deep.Shards {
		if s.Status != "unknown" || len(s.SHA256) != 64 {
			t.Fatalf("%+v", s)
		}
	}
}

func TestDeepSample(t *testing.T) {
	f := newFixture(t, next)
	l := f.layout
	r := deepRun(t, f, Options{}, 3)
	wantStatus(t, r, StatusOK)
	if r.Deep.ExpertSlices != l.LayerCount*3*len(l.Sections) || r.Deep.DenseTensors != 0 || r.Deep.BytesCompared != int64(l.LayerCount)*3*l.Payload() {
		t.Fatal(dump(r))
	}
	for _, s := range r.Deep.Shards {
		if s.Status != "unchecked" {
			t.Fatalf("%+v", s)
		}
	}
	// Sampling every expert sees any damage, and names the section.
	stripExtension(t, f.dir)
	sec, _ := l.Section("down_proj.weight")
	off := 6*l.ExpertStride + sec.Offset + 99
	flip(t, f.dir, qpack.LayerFile(1), off, 1)
	r = deepRun(t, f, Options{}, l.ExpertCount)
	wantStatus(t, r, StatusDamaged)
	if len(find(r, func(p Problem) bool {
		return is(p.Layer, 1) && is(p.Expert, 6) && p.Section == "down_proj.weight" && *p.Offset == off
	})) != 1 {
		t.Fatal(dump(r))
	}
}

// Hub sources: the fake Hub serves the checkpoint; a range answered with
// wrong bytes (right headers) is caught by the shard's hash.
func TestDeepHub(t *testing.T) {
	f := newFixture(t, next)
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	var files []hubtest.File
	ents, _ := os.ReadDir(f.src)
	for _, e := range ents {
		files = append(files, hubtest.File{Path: e.Name(), Data: must(os.ReadFile(filepath.Join(f.src, e.Name()))), LFS: strings.HasSuffix(e.Name(), ".safetensors")})
	}
	const repo = "test-org/tiny-next"
	hub.MustAddRepo(repo, files, hubtest.RepoOptions{})
	client, err := hfhub.NewClient(hfhub.Options{Endpoint: hub.URL, Anonymous: true, MaxRetries: 2,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond, StallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Source {
		src, err := OpenHubSource(context.Background(), client, repo, "main", hfhub.ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}

	src := open()
	r := run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
	wantStatus(t, r, StatusOK)
	if !regexp.MustCompile(`^test-org/tiny-next@[0-9a-f]{40}$`).MatchString(r.Deep.Source) {
		t.Fatalf("source %q", r.Deep.Source)
	}
	for _, s := range r.Deep.Shards {
		if s.Status != "ok" || len(s.Expected) != 2 {
			t.Fatalf("shard %+v: want checked against the manifest and the Hub listing", s)
		}
	}

	src = open() // headers read; the next CDN request for the shard is the stream
	shard := f.ckptShard[1]
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultWrongBytes, Route: hubtest.RouteCDN, Path: shard, Times: 1})
	r = run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
	wantStatus(t, r, StatusUnusable)
	got := find(r, func(p Problem) bool { return p.Kind == KindSourceHash && p.File == shard })
	if len(got) != 2 || len(r.ContainerProblems()) != 0 { // against the manifest and against the listing
		t.Fatal(dump(r))
	}

	// A repository whose shard differs from the one the container was made
	// from is refused before anything is streamed.
	files2 := append([]hubtest.File(nil), files...)
	for i := range files2 {
		if files2[i].Path == shard {
			d := append([]byte(nil), files2[i].Data...)
			d[len(d)-1] ^= 1
			files2[i].Data = d
		}
	}
	hub.MustAddRepo("test-org/other", files2, hubtest.RepoOptions{})
	src2, err := OpenHubSource(context.Background(), client, "test-org/other", "", hfhub.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r = run(t, f.dir, Options{Deep: &DeepOptions{Source: src2}})
	wantStatus(t, r, StatusUnusable)
	if len(find(r, func(p Problem) bool { return p.Kind == KindSource && p.File == shard })) != 1 || r.Deep.SourceBytesRead != 0 {
		t.Fatal(dump(r))
	}
}

func TestParseExpertName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ok      bool
		prefix  string
		layer   int
		section string
	}{
		{"model.layers.7.mlp.switch_mlp.gate_proj.weight", true, "model.", 7, "gate_proj.weight"},
		{"language_model.model.layers.12.mlp.switch_mlp.down_proj.biases", true, "language_model.model.", 12, "down_proj.biases"},
		{"layers.0.block.switch_glu.up_proj.scales", true, "", 0, "up_proj.scales"},
		{"model.layers.7.mlp.shared_expert.gate_proj.weight", false, "", 0, ""},
		{"model.layers.7.mlp.switch_mlp.gate_proj.bias", false, "", 0, ""},
		{"model.layers.07.mlp.switch_mlp.gate_proj.weight", false, "", 0, ""},
		{"model.layers.x.mlp.switch_mlp.gate_proj.weight", false, "", 0, ""},
		{"model.layers.-1.mlp.switch_mlp.gate_proj.weight", false, "", 0, ""},
		{"switch_mlp.gate_proj.weight", false, "", 0, ""},
		{"model.layers.3.switch_mlp.gate_proj.weight", true, "model.", 3, "gate_proj.weight"}, // the module path is optional
		{"layers.3.switch_mlp.gate_proj.weight", true, "", 3, "gate_proj.weight"},
	} {
		en, ok := parseExpertName(tc.name)
		if ok != tc.ok || (ok && (en.prefix != tc.prefix || en.layer != tc.layer || en.section != tc.section)) {
			t.Errorf("%s: %+v %v", tc.name, en, ok)
		}
	}
}

// The digest pass and the deep check run together (sharing container
// reads, whatever the window) or in turn, and find the same: same status,
// problems, files and shard checks. Each damage is also found where it
// is.
func TestDeepModesAgree(t *testing.T) {
	type damage struct {
		name  string
		apply func(t *testing.T, f *fixture) func(t *testing.T, r *Report)
	}
	damages := []damage{
		{"intact", func(t *testing.T, f *fixture) func(t *testing.T, r *Report) {
			return func(t *testing.T, r *Report) { wantStatus(t, r, StatusOK) }
		}},
		{"section and dense", func(t *testing.T, f *fixture) func(t *testing.T, r *Report) {
			l := f.layout
			sec := l.Sections[len(l.Sections)-1]
			off := 1*l.ExpertStride + sec.Offset + sec.Size - 1
			flip(t, f.dir, qpack.LayerFile(l.LayerCount-1), off, 0x10)
			tt := f.dense.Tensors[0]
			flip(t, f.dir, qpack.DenseName, tt.Offset, 1)
			return func(t *testing.T, r *Report) {
				wantStatus(t, r, StatusDamaged)
				if len(find(r, func(p Problem) bool {
					return p.Kind == KindMismatch && is(p.Layer, l.LayerCount-1) && is(p.Expert, 1) && p.Section == sec.Name && *p.Offset == off
				})) != 1 || len(find(r, func(p Problem) bool { return p.Kind == KindMismatch && p.Tensor == tt.Name && *p.Offset == tt.Offset })) != 1 {
					t.Fatal(dump(r))
				}
			}
		}},
		{"source", func(t *testing.T, f *fixture) func(t *testing.T, r *Report) {
			name := "model.layers.1.mlp.switch_mlp.gate_proj.weight"
			if strings.HasPrefix(f.dense.Tensors[0].Name, "language_model.") {
				name = "language_model." + name
			}
			shard, tt := sourceTensor(t, f, name)
			flip(t, f.src, shard, tt.Offset+tt.Size-1, 2)
			return func(t *testing.T, r *Report) {
				wantStatus(t, r, StatusUnusable)
				if len(find(r, func(p Problem) bool { return p.Kind == KindSourceHash && p.File == shard })) != 1 ||
					len(find(r, func(p Problem) bool { return p.Scope == ScopeSource && p.Kind == KindMismatch && p.Tensor == name })) != 1 {
					t.Fatal(dump(r))
				}
			}
		}},
	}
	for _, ck := range []string{next, "qwen3_5_moe-q4g32"} {
		for _, dm := range damages {
			t.Run(ck+"/"+dm.name, func(t *testing.T) {
				f := newFixture(t, ck)
				check := dm.apply(t, f)
				layerSize := f.manifest.Files[qpack.LayerFile(0)]
				modes := []struct {
					name string
					o    Options
					d    DeepOptions
				}{
					{"in turn", Options{}, DeepOptions{Window: -1}},
					{"shared", Options{}, DeepOptions{}},
					{"window of one layer file, one shard at a time", Options{}, DeepOptions{Window: layerSize, Shards: 1}},
					{"window too small to share", Options{}, DeepOptions{Window: 1}},
					{"shared, cache kept", Options{KeepCache: true}, DeepOptions{}},
				}
				var first string
				for _, m := range modes {
					src, err := OpenDirSource(f.src)
					if err != nil {
						t.Fatal(err)
					}
					d := m.d
					d.Source, d.BlockSize = src, 100<<10
					o := m.o
					o.Deep = &d
					r := run(t, f.dir, o)
					src.Close()
					check(t, r)
					got := summary(r)
					if first == "" {
						first = got
					} else if got != first {
						t.Fatalf("%s: differs from %s:\n%s\n---\n%s", m.name, modes[0].name, got, first)
					}
				}
			})
		}
	}
}

// summary is what a report says, less timings.
func summary(r *Report) string {
	notes := append([]string(nil), r.Notes...)
	sort.Strings(notes)
	b, _ := json.MarshalIndent(struct {
		Status   Status
		Problems []Problem
		Files    []FileResult
		Notes    []string
		Shards   []ShardCheck
		Compared int64
		Read     int64
		Hashed   int64
	}{r.Status, r.Problems, r.Files, notes, r.Deep.Shards, r.Deep.BytesCompared, r.Deep.SourceBytesRead, r.BytesHashed}, "", " ")
	return string(b)
}
