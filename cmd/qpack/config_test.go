package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
)

const configTiny = "../../testdata/tiny/qwen3_5_moe-q4g32"

// copyTiny copies a committed tiny checkpoint and edits its config.json.
func copyTiny(t *testing.T, src string, edit func(cfg map[string]any)) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "config.json" && edit != nil {
			b = editConfigJSON(t, b, edit)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func editConfigJSON(t *testing.T, b []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hubWith serves the files of dir as repository org/m.
func hubWith(t *testing.T, dir string) *hubtest.Server {
	t.Helper()
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []hubtest.File
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, hubtest.File{Path: e.Name(), Data: b, LFS: strings.HasSuffix(e.Name(), ".safetensors")})
	}
	hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	return hub
}

// weightRequests counts the fake Hub's requests for a safetensors file.
func weightRequests(hub *hubtest.Server) (n int, files []string) {
	for _, r := range hub.Requests() {
		if strings.HasSuffix(r.File, ".safetensors") || strings.HasSuffix(r.Path, ".safetensors") {
			n++
			files = append(files, r.Method+" "+r.Path)
		}
	}
	return n, files
}

var refusals = []struct {
	name string
	edit func(cfg map[string]any)
	want string
}{
	{"llama", func(c map[string]any) { c["model_type"] = "llama" }, `config.json: model_type: "llama" is not supported (supported: gemma4, qwen3_5_moe, qwen3_next)`},
	{"top-k above experts", func(c map[string]any) { c["text_config"].(map[string]any)["num_experts_per_tok"] = 9 },
		"config.json: text_config.num_experts_per_tok: 9 is more than num_experts 8"},
	{"absurd dim", func(c map[string]any) { c["text_config"].(map[string]any)["hidden_size"] = 1 << 40 },
		"text_config.hidden_size: 1099511627776 is above the limit 1048576 (MaxDim)"},
}

// repack --from-hf refuses a checkpoint the runner cannot run from its
// config.json alone: exit 2, the field named, no request for a shard byte,
// nothing written.
func TestRepackFromHubRefusesBeforeWeights(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			hub := hubWith(t, copyTiny(t, configTiny, tc.edit))
			out := filepath.Join(t.TempDir(), "m.qpack")
			text, err := runCLI(t, "repack", "--from-hf", "org/m", "--output", out)
			if code := exitStatus(io.Discard, err); code != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, err %v, want 2 and %q\n%s", code, err, tc.want, text)
			}
			if n, files := weightRequests(hub); n != 0 {
				t.Fatalf("%d requests for weight files: %v", n, files)
			}
			if len(hub.Requests()) == 0 {
				t.Fatal("no request logged at all: the log proves nothing")
			}
			for _, p := range []string{out, out + ".partial"} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s exists after a refusal: %v", p, err)
				}
			}
		})
	}
	// The control: a runnable checkpoint does fetch its shards, so the log
	// would show it.
	hub := hubWith(t, configTiny)
	out := filepath.Join(t.TempDir(), "m.qpack")
	if text, err := runCLI(t, "repack", "--from-hf", "org/m", "--output", out); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if n, _ := weightRequests(hub); n == 0 {
		t.Fatal("a good repack made no weight request: the check above is vacuous")
	}
}

// rewriteContainerConfig edits a container's config.json and keeps its
// manifest entry (size and digest) in step, as a container made from such a
// checkpoint would have it.
func rewriteContainerConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = editConfigJSON(t, b, edit)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(dir, qpack.ManifestName)
	mb, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	m, err := qpack.ParseManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	m.ModelName = cfg.ModelType
	m.Files["config.json"] = int64(len(b))
	sum := blake3.Sum256(b)
	m.Ext.FileDigests["config.json"] = hex.EncodeToString(sum[:])
	mb, err = m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mp, mb, 0o644); err != nil {
		t.Fatal(err)
	}
}

// verify-install --deep --source REPO refuses a container of a model the
// runner cannot run before the source is opened: exit 2, the field named,
// no request to the Hub at all.
func TestVerifyDeepRefusesBeforeWeights(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			pack := filepath.Join(t.TempDir(), "m.qpack")
			if _, err := repack.Run(context.Background(), repack.Options{FromDir: configTiny, Output: pack, ToolVersion: "test",
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
				t.Fatal(err)
			}
			rewriteContainerConfig(t, pack, tc.edit)
			hub := hubWith(t, copyTiny(t, configTiny, tc.edit))
			text, err := runCLI(t, "verify-install", pack, "--deep", "--source", "org/m", "--no-receipt")
			if code := exitStatus(io.Discard, err); code != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, err %v, want 2 and %q\n%s", code, err, tc.want, text)
			}
			if n := len(hub.Requests()); n != 0 {
				t.Fatalf("%d Hub requests before the refusal: %+v", n, hub.Requests())
			}
			// Without --deep the same container is unusable too (exit 2).
			text, err = runCLI(t, "verify-install", pack, "--no-receipt")
			if code := exitStatus(io.Discard, err); code != 2 {
				t.Fatalf("fast check: exit %d, err %v\n%s", code, err, text)
			}
		})
	}
}

// mlx-lm writes text_config.model_type "qwen3_5" in a qwen3_5_moe
// checkpoint: logits and generate run it, with the same results as the
// transformers spelling.
func TestRunsMLXLMQwen35Spelling(t *testing.T) {
	edited := copyTiny(t, configTiny, func(c map[string]any) { c["text_config"].(map[string]any)["model_type"] = "qwen3_5" })
	var outs, files [2]string
	for i, dir := range []string{configTiny, edited} {
		files[i] = filepath.Join(t.TempDir(), "logits.safetensors")
		text, err := runLogitsCLI(t, dir, "--tokens", "3,77,200,5", "--json", "--output", files[i])
		if err != nil {
			t.Fatalf("%s: %v\n%s", dir, err, text)
		}
		var res logitsResult
		if err := json.Unmarshal([]byte(text), &res); err != nil {
			t.Fatalf("%v:\n%s", err, text)
		}
		if res.ModelType != "qwen3_5_moe" || len(res.Greedy) != 4 {
			t.Fatalf("%s: %+v", dir, res)
		}
		res.Model, res.Output = "", ""
		b, _ := json.Marshal(res)
		outs[i] = string(b)
	}
	a, errA := os.ReadFile(files[0])
	b, errB := os.ReadFile(files[1])
	if errA != nil || errB != nil || len(a) < 1000 || string(a) != string(b) || outs[0] != outs[1] {
		t.Fatalf("logits differ between the spellings (%v %v):\n%s\n%s", errA, errB, outs[0], outs[1])
	}
	var gens [2]string
	for i, dir := range []string{configTiny, edited} {
		out, _, err := runGenCLI(t, "generate", dir, "--prompt", "Hello there", "--max-new", "4", "--temperature", "0")
		if err != nil {
			t.Fatalf("generate %s: %v", dir, err)
		}
		gens[i] = out
	}
	if gens[0] != gens[1] || gens[0] == "" {
		t.Fatalf("generate differs: %q vs %q", gens[0], gens[1])
	}
}
