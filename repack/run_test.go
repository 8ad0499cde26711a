package repack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

func variant(t testing.TB, name string) string {
	t.Helper()
	for _, v := range tinymodel.Variants() {
		if v.Name == name {
			return tiny(t, name, v.Spec)
		}
	}
	t.Fatalf("no variant %s", name)
	return ""
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func mustNotExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists", p)
		}
	}
}

// stopAt returns options that cancel the repack once the journal's
// frontier reaches k.
func stopAt(k int) (func(*Options), context.Context) {
	ctx, cancel := context.WithCancel(context.Background())
	return func(o *Options) {
		o.hooks = &testHooks{afterCommit: func(f int) {
			if f >= k {
				cancel()
			}
		}}
	}, ctx
}

// A repack stopped mid-shard resumes from the sha256 midstate in the
// journal: no completed range is read again, and the shard's sha256 comes
// out right.
func TestResumeMidShard(t *testing.T) {
	src := variant(t, "qwen3_next-q8g32") // one 1.2 MB shard: ~77 ranges of 16 KiB
	tmp := t.TempDir()
	ref := filepath.Join(tmp, "ref.qpack")
	runDir(t, src, ref, nil)

	out := filepath.Join(tmp, "out.qpack")
	mod, ctx := stopAt(30)
	o := Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10, ToolVersion: "test"}
	mod(&o)
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped run: %v", err)
	}
	mustNotExist(t, out)
	var j journal
	data, err := os.ReadFile(filepath.Join(out+".partial", JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	if j.Frontier < 30 || j.HashState == "" || len(j.ShardSHA256) != 0 {
		t.Fatalf("journal after the stop: frontier %d, hash state %q, %d shard hashes", j.Frontier, j.HashState, len(j.ShardSHA256))
	}

	// Count the source bytes the resumed run reads.
	var read atomic.Int64 // workers call the hook concurrently
	res := runDir(t, src, out, func(o *Options) {
		o.hooks = &testHooks{afterRange: func(r srcRange, redo bool) {
			if r.id < j.Frontier {
				t.Errorf("completed range %d fetched again", r.id)
			}
			read.Add(r.end - r.off)
		}}
	})
	if !res.Resumed || res.RangesReused != j.Frontier || res.RangesRedone != 0 {
		t.Errorf("resumed=%v reused=%d redone=%d, want true %d 0", res.Resumed, res.RangesReused, res.RangesRedone, j.Frontier)
	}
	st, _ := os.Stat(filepath.Join(src, "model.safetensors"))
	if want := st.Size() - int64(j.Frontier)*(16<<10); read.Load() != want {
		t.Errorf("resumed run read %d source bytes, want %d", read.Load(), want)
	}
	if want := fileSHA256(t, filepath.Join(src, "model.safetensors")); res.Shards[0].SHA256 != want {
		t.Errorf("shard sha256 %s, want %s", res.Shards[0].SHA256, want)
	}
	sameContainer(t, ref, out, false)
}

// Bytes damaged on disk after their range completed are found by the
// journal's digests on resume and fetched again.
func TestResumeRedoesDamagedRanges(t *testing.T) {
	src := variant(t, "qwen3_next-q4g64")
	tmp := t.TempDir()
	ref := filepath.Join(tmp, "ref.qpack")
	runDir(t, src, ref, nil)

	out := filepath.Join(tmp, "out.qpack")
	mod, ctx := stopAt(1 << 30) // never: stop before Finish instead
	o := Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10, ToolVersion: "test"}
	mod(&o)
	o.hooks.beforeFinish = func() error { return errStopped }
	if _, err := Run(ctx, o); !errors.Is(err, errStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	partial := out + ".partial"
	// Flip one byte in layer 3 (expert 5, inside gate_proj.weight) and one
	// in the middle of model.safetensors.
	lf := filepath.Join(partial, "packed_experts", "layer_03.bin")
	layout := readLayout(t, ref)
	flip(t, lf, 5*layout.ExpertStride+7)
	dst := filepath.Join(partial, "model.safetensors")
	st, _ := os.Stat(dst)
	flip(t, dst, st.Size()/2)

	res := runDir(t, src, out, nil)
	if res.RangesRedone != 2 {
		t.Errorf("%d ranges redone, want 2", res.RangesRedone)
	}
	sameContainer(t, ref, out, false)
}

func readLayout(t *testing.T, dir string) *qpack.Layout {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "packed_experts", "layout.json"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := qpack.ParseLayout(data)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// A partial repack of another source (or plan, or with a broken journal)
// is refused with a message pointing at --discard-partial, which then
// starts over.
func TestResumeRefusesOtherSource(t *testing.T) {
	src := filepath.Join(t.TempDir(), "ckpt")
	copyDir(t, variant(t, "qwen3_5_moe-q4g32"), src)
	out := filepath.Join(t.TempDir(), "out.qpack")
	mod, ctx := stopAt(5)
	o := Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10}
	mod(&o)
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The source changes (same sizes, new modification time).
	shard := filepath.Join(src, "model-00002-of-00003.safetensors")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(shard, later, later); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10})
	if err == nil || !strings.Contains(err.Error(), "another source") || !strings.Contains(err.Error(), "--discard-partial") {
		t.Fatalf("err = %v", err)
	}
	// Another range size is another plan of the bytes.
	os.Chtimes(shard, time.Now(), time.Now())
	mod, ctx = stopAt(5)
	o = Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10, DiscardPartial: true}
	mod(&o)
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 32 << 10})
	if err == nil || !strings.Contains(err.Error(), "range size") {
		t.Fatalf("err = %v", err)
	}
	// A damaged journal.
	if err := os.WriteFile(filepath.Join(out+".partial", JournalName), []byte(`{"version":1,"frontier":3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10})
	if err == nil || !strings.Contains(err.Error(), "--discard-partial") {
		t.Fatalf("err = %v", err)
	}
	res := runDir(t, src, out, func(o *Options) { o.DiscardPartial = true })
	if res.Resumed {
		t.Error("a discarded partial was resumed")
	}
	checkAgainstSource(t, src, out)
}

// The states a kill inside Finish leaves behind all resume to the same
// container: manifest written with the journal still there, manifest
// written and the journal removed, container already renamed.
func TestResumeAfterFinishStates(t *testing.T) {
	name := "qwen3_next-q4g64"
	src := variant(t, name)
	s := newHub(t, hubtest.Config{})
	repo := "mlx-community/" + name
	s.MustAddRepo(repo, repoFiles(t, src), hubtest.RepoOptions{})
	tmp := t.TempDir()
	ref := filepath.Join(tmp, "ref.qpack")
	if _, err := Run(context.Background(), hubOpts(s, repo, ref)); err != nil {
		t.Fatal(err)
	}
	// The journal as it was just before Finish.
	out := filepath.Join(tmp, "out.qpack")
	o := hubOpts(s, repo, out)
	var journalBytes []byte
	o.hooks = &testHooks{beforeFinish: func() error {
		var err error
		journalBytes, err = os.ReadFile(filepath.Join(out+".partial", JournalName))
		return err
	}}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	cdnGets := func() int {
		n := 0
		for _, r := range s.Requests() {
			if r.Route == hubtest.RouteCDN && r.Method == "GET" && !strings.HasPrefix(r.Range, "bytes=0-7") && !strings.HasPrefix(r.Range, "bytes=8-") {
				n++
			}
		}
		return n
	}
	for _, state := range []string{"manifest+journal", "manifest", "placed"} {
		t.Run(state, func(t *testing.T) {
			partial := out + ".partial"
			if state != "placed" {
				if err := os.Rename(out, partial); err != nil {
					t.Fatal(err)
				}
			}
			if state == "manifest+journal" {
				if err := os.WriteFile(filepath.Join(partial, JournalName), journalBytes, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s.ResetLog()
			res, err := Run(context.Background(), hubOpts(s, repo, out))
			if err != nil {
				t.Fatal(err)
			}
			if n := cdnGets(); n != 0 {
				t.Errorf("%d range requests after the kill state %s", n, state)
			}
			if state == "placed" && !res.AlreadyComplete {
				t.Error("a complete container was not recognized")
			}
			sameContainer(t, ref, out, false)
			mustNotExist(t, partial)
		})
	}
	// A finished partial whose data was damaged after hashing is not
	// placed; it is rebuilt.
	partial := out + ".partial"
	if err := os.Rename(out, partial); err != nil {
		t.Fatal(err)
	}
	flip(t, filepath.Join(partial, "packed_experts", "layer_01.bin"), 100)
	if _, err := Run(context.Background(), hubOpts(s, repo, out)); err != nil {
		t.Fatal(err)
	}
	sameContainer(t, ref, out, false)
}

func TestExistingOutput(t *testing.T) {
	src := variant(t, "qwen3_next-q8g32")
	out := filepath.Join(t.TempDir(), "m.qpack")
	runDir(t, src, out, nil)
	before := treeFiles(t, out)
	_, err := Run(context.Background(), Options{FromDir: src, Output: out, Reserve: -1})
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("err = %v", err)
	}
	res := runDir(t, src, out, func(o *Options) { o.Overwrite = true })
	if res.AlreadyComplete {
		t.Error("overwrite did not rebuild")
	}
	after := treeFiles(t, out)
	if len(before) != len(after) {
		t.Fatal("files differ")
	}
	for p := range before {
		if string(before[p]) != string(after[p]) {
			t.Errorf("%s differs after rebuilding", p)
		}
	}
}

func TestLockedOutput(t *testing.T) {
	src := variant(t, "qwen3_next-q8g32")
	out := filepath.Join(t.TempDir(), "m.qpack")
	unlock, err := lockOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Options{FromDir: src, Output: out, Reserve: -1})
	unlock()
	if err == nil || !strings.Contains(err.Error(), "another qpack process") {
		t.Fatalf("err = %v", err)
	}
	mustNotExist(t, out, out+".partial")
}

func TestFreeSpace(t *testing.T) {
	src := variant(t, "qwen3_next-q8g32")
	out := filepath.Join(t.TempDir(), "m.qpack")
	old := freeSpace
	freeSpace = func(string) (int64, error) { return 300 << 10, nil }
	defer func() { freeSpace = old }()
	_, err := Run(context.Background(), Options{FromDir: src, Output: out, Reserve: 1 << 10})
	if err == nil || !strings.Contains(err.Error(), "not enough free space") {
		t.Fatalf("err = %v", err)
	}
	mustNotExist(t, out, out+".partial", out+".lock")
	freeSpace = func(string) (int64, error) { return 1 << 40, nil }
	runDir(t, src, out, func(o *Options) { o.Reserve = 1 << 30 })
}

// rewriteShard rewrites one safetensors file of dir through edit, keeping
// the other tensors' bytes, and fixes the index.
func rewriteShard(t *testing.T, dir, shard string, edit func(specs []safetensors.Spec, data map[string][]byte) ([]safetensors.Spec, map[string][]byte)) {
	t.Helper()
	raw := readRaw(t, filepath.Join(dir, shard))
	var specs []safetensors.Spec
	data := map[string][]byte{}
	for name, rt := range raw.tensors {
		specs = append(specs, safetensors.Spec{Name: name, DType: safetensors.DType(rt.DType), Shape: rt.Shape})
		data[name] = append([]byte(nil), raw.bytes(name)...)
	}
	specs, data = edit(specs, data)
	err := safetensors.WriteFile(filepath.Join(dir, shard), specs, map[string]string{"format": "mlx"}, func(i int, s safetensors.Spec) (io.Reader, error) {
		return strings.NewReader(string(data[s.Name])), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ip := filepath.Join(dir, "model.safetensors.index.json")
	ib, err := os.ReadFile(ip)
	if err != nil {
		return
	}
	var ix map[string]any
	json.Unmarshal(ib, &ix)
	wm := ix["weight_map"].(map[string]any)
	for k, v := range wm {
		if v == shard {
			delete(wm, k)
		}
	}
	for _, s := range specs {
		wm[s.Name] = shard
	}
	ib, _ = json.Marshal(ix)
	os.WriteFile(ip, ib, 0o644)
}

// mtp.* and vision tensors are skipped and reported; their bytes still go
// through the shard's sha256.
func TestSkippedTensors(t *testing.T) {
	src := filepath.Join(t.TempDir(), "ckpt")
	copyDir(t, variant(t, "qwen3_next-q4g64"), src)
	rng := rand.New(rand.NewPCG(1, 2))
	rewriteShard(t, src, "model-00002-of-00002.safetensors", func(specs []safetensors.Spec, data map[string][]byte) ([]safetensors.Spec, map[string][]byte) {
		for _, x := range []struct {
			s    safetensors.Spec
			size int
		}{
			{safetensors.Spec{Name: "mtp.fc.weight", DType: safetensors.BF16, Shape: []int64{64, 128}}, 64 * 128 * 2},
			{safetensors.Spec{Name: "mtp.layers.0.mlp.switch_mlp.gate_proj.weight", DType: safetensors.U32, Shape: []int64{8, 64, 8}}, 8 * 64 * 8 * 4},
			{safetensors.Spec{Name: "vision_tower.patch_embed.weight", DType: safetensors.F32, Shape: []int64{40000}}, 40000 * 4},
		} {
			specs = append(specs, x.s)
			b := make([]byte, x.size)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			data[x.s.Name] = b
		}
		return specs, data
	})
	out := filepath.Join(t.TempDir(), "m.qpack")
	res := runDir(t, src, out, nil)
	if len(res.Skipped) != 3 {
		t.Fatalf("skipped %+v", res.Skipped)
	}
	var skippedBytes int64
	for _, s := range res.Skipped {
		if s.Shard != "model-00002-of-00002.safetensors" || s.Reason == "" {
			t.Errorf("skipped %+v", s)
		}
		skippedBytes += s.Bytes
	}
	if skippedBytes != 64*128*2+8*64*8*4+40000*4 || res.SkippedBytes != skippedBytes {
		t.Errorf("skipped bytes %d / %d", skippedBytes, res.SkippedBytes)
	}
	checkAgainstSource(t, src, out)
	for _, sh := range res.Shards {
		if want := fileSHA256(t, filepath.Join(src, sh.Name)); sh.SHA256 != want {
			t.Errorf("%s: sha256 %s, want %s", sh.Name, sh.SHA256, want)
		}
	}
	c, err := qpack.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tn := range c.Dense.Tensors {
		if strings.HasPrefix(tn.Name, "mtp.") || strings.HasPrefix(tn.Name, "vision_tower.") {
			t.Errorf("%s in model.safetensors", tn.Name)
		}
	}
}

// Bad checkpoints fail before anything is written.
func TestBadInputWritesNothing(t *testing.T) {
	base := variant(t, "qwen3_5_moe-q4g32")
	cases := []struct {
		name string
		edit func(dir string)
		want string
	}{
		{"missing layer", func(dir string) {
			for _, sh := range []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"} {
				rewriteShard(t, dir, sh, func(specs []safetensors.Spec, data map[string][]byte) ([]safetensors.Spec, map[string][]byte) {
					var keep []safetensors.Spec
					for _, s := range specs {
						if !strings.Contains(s.Name, "layers.5.mlp.switch_mlp.") {
							keep = append(keep, s)
						}
					}
					return keep, data
				})
			}
		}, "layer 5 has no routed-expert tensors"},
		{"section table differs", func(dir string) {
			for _, sh := range []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"} {
				rewriteShard(t, dir, sh, func(specs []safetensors.Spec, data map[string][]byte) ([]safetensors.Spec, map[string][]byte) {
					var keep []safetensors.Spec
					for _, s := range specs {
						if !strings.HasSuffix(s.Name, "layers.6.mlp.switch_mlp.up_proj.biases") {
							keep = append(keep, s)
						}
					}
					return keep, data
				})
			}
		}, "layer 6 has expert sections"},
		{"experts not divisible", func(dir string) {
			cfgPath := filepath.Join(dir, "config.json")
			b, _ := os.ReadFile(cfgPath)
			os.WriteFile(cfgPath, []byte(strings.Replace(string(b), `"num_experts": 8`, `"num_experts": 3`, 1)), 0o644)
		}, "text_config.num_experts: 3, but tensor language_model.model.layers.0.mlp.gate.weight"},
		{"not an MLX checkpoint", func(dir string) {
			for _, sh := range []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"} {
				rewriteShard(t, dir, sh, func(specs []safetensors.Spec, data map[string][]byte) ([]safetensors.Spec, map[string][]byte) {
					for i, s := range specs {
						if strings.Contains(s.Name, ".switch_mlp.") {
							n := strings.Replace(s.Name, ".switch_mlp.", ".experts.", 1)
							data[n] = data[s.Name]
							specs[i].Name = n
						}
					}
					return specs, data
				})
			}
		}, "not an MLX"},
		{"index disagrees with shards", func(dir string) {
			ip := filepath.Join(dir, "model.safetensors.index.json")
			b, _ := os.ReadFile(ip)
			var ix map[string]any
			json.Unmarshal(b, &ix)
			ix["weight_map"].(map[string]any)["language_model.model.norm.weight"] = "model-00001-of-00003.safetensors"
			b, _ = json.Marshal(ix)
			os.WriteFile(ip, b, 0o644)
		}, "language_model.model.norm.weight"},
		{"truncated shard", func(dir string) {
			p := filepath.Join(dir, "model-00002-of-00003.safetensors")
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-10)
		}, "model-00002-of-00003.safetensors"},
		{"no config", func(dir string) { os.Remove(filepath.Join(dir, "config.json")) }, "no config.json"},
		{"no weights", func(dir string) {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.Contains(e.Name(), "safetensors") {
					os.Remove(filepath.Join(dir, e.Name()))
				}
			}
		}, "no safetensors weights"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "ckpt")
			copyDir(t, base, src)
			tc.edit(src)
			out := filepath.Join(t.TempDir(), "m.qpack")
			_, err := Run(context.Background(), Options{FromDir: src, Output: out, Reserve: -1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			mustNotExist(t, out, out+".partial", out+".lock")
		})
	}
}

// manifest.json and layout.json carry every key Swiftlet's decoder
// requires, with the JSON type it decodes.
func TestSwiftletKeys(t *testing.T) {
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-f32"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.qpack")
			runDir(t, variant(t, name), out, nil)
			m := manifestMap(t, out)
			str := func(m map[string]any, k string) {
				if _, ok := m[k].(string); !ok {
					t.Errorf("%s: %T, want a string", k, m[k])
				}
			}
			num := func(m map[string]any, k string) float64 {
				f, ok := m[k].(float64)
				if !ok || f != float64(int64(f)) {
					t.Errorf("%s: %v (%T), want an integer", k, m[k], m[k])
				}
				return f
			}
			str(m, "magic")
			if m["magic"] != "QPACK" {
				t.Errorf("magic %v", m["magic"])
			}
			if num(m, "version") != 1 {
				t.Errorf("version %v", m["version"])
			}
			str(m, "modelName")
			str(m, "sourceCheckpoint")
			if strings.Contains(name, "q4") {
				if num(m, "quantBits") != 4 || num(m, "quantGroupSize") != 64 {
					t.Errorf("quant %v/%v", m["quantBits"], m["quantGroupSize"])
				}
			} else if _, ok := m["quantBits"]; ok && m["quantBits"] != nil {
				t.Errorf("float model has quantBits %v", m["quantBits"])
			}
			files, ok := m["files"].(map[string]any)
			if !ok {
				t.Fatalf("files: %T", m["files"])
			}
			for _, want := range []string{"config.json", "model.safetensors", "packed_experts/layout.json", "packed_experts/layer_00.bin", "tokenizer.json"} {
				if _, ok := files[want].(float64); !ok {
					t.Errorf("files[%s]: %T", want, files[want])
				}
			}
			lb, _ := os.ReadFile(filepath.Join(out, "packed_experts", "layout.json"))
			var l map[string]any
			json.Unmarshal(lb, &l)
			num(l, "expertCount")
			num(l, "layerCount")
			if int64(num(l, "expertStride"))%16384 != 0 {
				t.Errorf("stride %v", l["expertStride"])
			}
			ll, ok := l["linearLayers"].([]any)
			if !ok || len(ll) != 8 {
				t.Fatalf("linearLayers %v", l["linearLayers"])
			}
			for i, v := range ll {
				if b, ok := v.(bool); !ok || b != ((i+1)%4 != 0) {
					t.Errorf("linearLayers[%d] = %v", i, v)
				}
			}
			secs, ok := l["sections"].([]any)
			if !ok || len(secs) == 0 {
				t.Fatalf("sections %v", l["sections"])
			}
			for _, s := range secs {
				sm := s.(map[string]any)
				str(sm, "name")
				str(sm, "dtype")
				num(sm, "offset")
				num(sm, "size")
				shape, ok := sm["shape"].([]any)
				if !ok {
					t.Errorf("shape %T", sm["shape"])
				}
				for _, d := range shape {
					if _, ok := d.(float64); !ok {
						t.Errorf("shape entry %T", d)
					}
				}
			}
		})
	}
}

func TestProgressAndResult(t *testing.T) {
	src := variant(t, "qwen3_next-q4g64")
	out := filepath.Join(t.TempDir(), "m.qpack")
	var last = map[string]Progress{}
	layers := map[int]bool{}
	res := runDir(t, src, out, func(o *Options) {
		o.OnProgress = func(p Progress) {
			if prev, ok := last[p.Phase]; ok && p.Done < prev.Done {
				t.Errorf("%s progress went back: %d after %d", p.Phase, p.Done, prev.Done)
			}
			last[p.Phase] = p
			if p.Layer >= 0 {
				layers[p.Layer] = true
			}
		}
	})
	for _, ph := range []string{"copy", "finish"} {
		p, ok := last[ph]
		if !ok || p.Done != p.Total || p.Total <= 0 {
			t.Errorf("phase %s ended at %+v", ph, p)
		}
	}
	if last["copy"].Total != res.SourceBytes {
		t.Errorf("copy total %d, source bytes %d", last["copy"].Total, res.SourceBytes)
	}
	if len(layers) != 8 {
		t.Errorf("progress named layers %v", layers)
	}
	var srcBytes int64
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			st, _ := os.Stat(filepath.Join(src, e.Name()))
			srcBytes += st.Size()
		}
	}
	if res.SourceBytes != srcBytes || res.FetchedBytes != srcBytes {
		t.Errorf("source %d fetched %d, want %d", res.SourceBytes, res.FetchedBytes, srcBytes)
	}
	var outBytes int64
	for _, d := range treeFiles(t, out) {
		outBytes += int64(len(d))
	}
	mb, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
	if res.OutputBytes != outBytes-int64(len(mb)) {
		t.Errorf("output bytes %d, files hold %d (+%d manifest)", res.OutputBytes, outBytes-int64(len(mb)), len(mb))
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatal(err)
	}
	if res.Mode != "repack" || res.SourceDir != "qwen3_next-q4g64" || len(res.Shards) != 2 {
		t.Errorf("result %+v", res)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		a, _ := os.ReadFile(filepath.Join(src, f))
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s not copied unchanged", f)
		}
	}
}

// A Hub repo holding a built container is downloaded, not repacked.
func TestPrebuilt(t *testing.T) {
	src := variant(t, "qwen3_next-q4g64")
	built := filepath.Join(t.TempDir(), "built.qpack")
	runDir(t, src, built, nil)
	var files []hubtest.File
	for p, d := range treeFiles(t, built) {
		files = append(files, hubtest.File{Path: p, Data: d, LFS: strings.HasSuffix(p, ".bin") || strings.HasSuffix(p, ".safetensors")})
	}
	files = append(files, hubtest.File{Path: "README.md", Data: []byte("# a container\n")})
	s := newHub(t, hubtest.Config{})
	s.MustAddRepo("org/tiny-qpack", files, hubtest.RepoOptions{})
	s.Inject(hubtest.Fault{Kind: hubtest.FaultCut, Route: hubtest.RouteCDN, Path: "packed_experts/layer_02.bin", AfterBytes: 1000})
	out := filepath.Join(t.TempDir(), "dl.qpack")
	res, err := Run(context.Background(), hubOpts(s, "org/tiny-qpack", out))
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "prebuilt" {
		t.Fatalf("mode %s", res.Mode)
	}
	sameContainer(t, built, out, false)
	mustNotExist(t, filepath.Join(out, "README.md"), out+".partial")
	res, err = Run(context.Background(), hubOpts(s, "org/tiny-qpack", out))
	if err != nil || !res.AlreadyComplete {
		t.Fatalf("second run: %v, %+v", err, res)
	}
	// A corrupted layer file on the Hub is caught by its sha256.
	s.Inject(hubtest.Fault{Kind: hubtest.FaultWrongBytes, Route: hubtest.RouteCDN, Path: "packed_experts/layer_05.bin", Times: -1})
	out2 := filepath.Join(t.TempDir(), "dl2.qpack")
	_, err = Run(context.Background(), hubOpts(s, "org/tiny-qpack", out2))
	if err == nil || !strings.Contains(err.Error(), "layer_05.bin") {
		t.Fatalf("err = %v", err)
	}
	mustNotExist(t, out2)
}

// An interrupted prebuilt download resumes: files already verified are not
// fetched again.
func TestPrebuiltResume(t *testing.T) {
	src := variant(t, "qwen3_5_moe-q4g32")
	built := filepath.Join(t.TempDir(), "built.qpack")
	runDir(t, src, built, nil)
	var files []hubtest.File
	for p, d := range treeFiles(t, built) {
		files = append(files, hubtest.File{Path: p, Data: d, LFS: strings.HasSuffix(p, ".bin") || strings.HasSuffix(p, ".safetensors")})
	}
	s := newHub(t, hubtest.Config{})
	s.MustAddRepo("org/tiny-qpack", files, hubtest.RepoOptions{})
	s.Inject(hubtest.Fault{Kind: hubtest.FaultStatus, Status: 500, Route: hubtest.RouteCDN, Path: "packed_experts/layer_06.bin", Times: -1})
	out := filepath.Join(t.TempDir(), "dl.qpack")
	o := hubOpts(s, "org/tiny-qpack", out)
	o.Connections = 1
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "layer_06.bin") {
		t.Fatalf("err = %v", err)
	}
	mustNotExist(t, out)
	fetched := map[string]bool{}
	for _, r := range s.Requests() {
		if r.Route == hubtest.RouteCDN && (r.Status == 206 || r.Status == 200) {
			fetched[r.File] = true
		}
	}
	if len(fetched) == 0 {
		t.Fatal("nothing was fetched before the failure")
	}
	s.ClearFaults()
	s.ResetLog()
	res, err := Run(context.Background(), hubOpts(s, "org/tiny-qpack", out))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumed || res.Mode != "prebuilt" {
		t.Errorf("result %+v", res)
	}
	for _, r := range s.Requests() {
		if r.Route == hubtest.RouteCDN && r.Method == "GET" && fetched[r.File] {
			t.Errorf("%s fetched again after it was complete", r.File)
		}
	}
	sameContainer(t, built, out, false)
}
