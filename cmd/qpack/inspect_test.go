package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
)

// runCLI runs the qpack CLI in-process and returns stdout.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	app.ErrWriter = &out
	err := app.Run(append([]string{"qpack"}, args...))
	return out.String(), err
}

// expertPayload computes one expert's bytes from the dims by hand: gate and
// up are [I, H], down is [H, I]; quantized rows hold cols*bits/8 bytes of
// packed weight and cols/group bf16 scales and biases.
func expertPayload(d tinymodel.Dims, bits, group int) int64 {
	H, I := int64(d.HiddenSize), int64(d.MoeIntermediateSize)
	mat := func(rows, cols int64) int64 {
		if bits == 0 {
			return rows * cols * 4
		}
		return rows*cols*int64(bits)/8 + 2*rows*(cols/int64(group))*2
	}
	return 2*mat(I, H) + mat(H, I)
}

func TestInspectCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec tinymodel.Spec
	}{
		{"next-q4g64-sharded", tinymodel.Spec{Arch: tinymodel.ArchQwen3Next, Bits: 4, GroupSize: 64, Shards: 2, Seed: 1}},
		{"q35-q8g32", tinymodel.Spec{Arch: tinymodel.ArchQwen35MoE, Bits: 8, GroupSize: 32, Seed: 2}},
		{"next-f32", tinymodel.Spec{Arch: tinymodel.ArchQwen3Next, Seed: 3}},
		{"q35-q3g64", tinymodel.Spec{Arch: tinymodel.ArchQwen35MoE, Bits: 3, GroupSize: 64, Shards: 3, Seed: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			if err := tinymodel.Generate(dir, tc.spec); err != nil {
				t.Fatal(err)
			}
			out, err := runCLI(t, "inspect", "--json", dir)
			if err != nil {
				t.Fatalf("inspect: %v\n%s", err, out)
			}
			var rep inspectReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("bad JSON: %v\n%s", err, out)
			}
			d := tinymodel.DefaultDims()
			if rep.Kind != "mlx-checkpoint" || rep.ModelType != tc.spec.Arch {
				t.Errorf("kind %q model %q, want mlx-checkpoint %q", rep.Kind, rep.ModelType, tc.spec.Arch)
			}
			want := expertPayload(d, tc.spec.Bits, tc.spec.GroupSize)
			if rep.Experts == nil {
				t.Fatalf("no expert report: %s", rep.Note)
			}
			if rep.Experts.Payload != want {
				t.Errorf("expert payload %d, want %d", rep.Experts.Payload, want)
			}
			stride := (want + 16383) / 16384 * 16384
			if rep.Experts.Stride != stride {
				t.Errorf("stride %d, want %d", rep.Experts.Stride, stride)
			}
			if rep.Experts.Count != d.NumExperts || rep.Experts.Layers != d.NumHiddenLayers {
				t.Errorf("experts %d x %d layers, want %d x %d", rep.Experts.Count, rep.Experts.Layers, d.NumExperts, d.NumHiddenLayers)
			}
			if rep.ExpertBytes != want*int64(d.NumExperts*d.NumHiddenLayers) {
				t.Errorf("expert bytes %d, want %d", rep.ExpertBytes, want*int64(d.NumExperts*d.NumHiddenLayers))
			}
			// Every tensor is either dense or an expert tensor: their bytes
			// plus the headers make the files.
			var files int64
			entries, _ := os.ReadDir(dir)
			nShards := 0
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".safetensors") {
					fi, _ := e.Info()
					files += fi.Size()
					nShards++
				}
			}
			if rep.TotalBytes != files {
				t.Errorf("total bytes %d, files hold %d", rep.TotalBytes, files)
			}
			if rep.DenseBytes+rep.ExpertBytes >= files || rep.DenseBytes <= 0 {
				t.Errorf("dense %d + expert %d not below file bytes %d", rep.DenseBytes, rep.ExpertBytes, files)
			}
			if len(rep.Shards) != nShards {
				t.Errorf("%d shards reported, %d on disk", len(rep.Shards), nShards)
			}
			if tc.spec.Bits > 0 {
				q := rep.Quantization
				if q == nil || q.Bits != tc.spec.Bits || q.GroupSize != tc.spec.GroupSize || q.ExpertBits != tc.spec.Bits {
					t.Errorf("quantization %+v, want %d-bit g%d", q, tc.spec.Bits, tc.spec.GroupSize)
				} else if len(q.Overrides) != 2*d.NumHiddenLayers {
					t.Errorf("%d overrides, want router + shared gate per layer = %d", len(q.Overrides), 2*d.NumHiddenLayers)
				}
			} else if rep.Quantization != nil {
				t.Errorf("float checkpoint reported quantized: %+v", rep.Quantization)
			}
			full := 0
			for _, l := range rep.Layers {
				if l.Kind == "full_attention" {
					full++
					if (l.Layer+1)%d.FullAttentionInterval != 0 {
						t.Errorf("layer %d reported full attention", l.Layer)
					}
				}
			}
			if full != d.NumHiddenLayers/d.FullAttentionInterval {
				t.Errorf("%d full-attention layers, want %d", full, d.NumHiddenLayers/d.FullAttentionInterval)
			}
			// The human form names the key facts too.
			txt, err := runCLI(t, "inspect", dir)
			if err != nil || !strings.Contains(txt, "gate_proj.weight") || !strings.Contains(txt, "experts") {
				t.Errorf("text output lacks the section table (err %v):\n%s", err, txt)
			}
		})
	}
}

func TestInspectSafetensorsFileAndErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := tinymodel.Generate(dir, tinymodel.Spec{Arch: tinymodel.ArchQwen3Next, Bits: 4, GroupSize: 64, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "inspect", "--json", filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Kind != "safetensors" || rep.Tensors == 0 {
		t.Fatalf("safetensors report %+v (%v)", rep, err)
	}
	// A directory with no config.json is neither a container nor a checkpoint.
	empty := t.TempDir()
	if _, err := runCLI(t, "inspect", empty); err == nil || !strings.Contains(err.Error(), "not a .qpack") {
		t.Errorf("empty dir: got %v", err)
	}
	// A container whose manifest is cut short names the container's file,
	// once.
	ctr := filepath.Join(t.TempDir(), "c.qpack")
	os.Mkdir(ctr, 0o755)
	os.WriteFile(filepath.Join(ctr, "manifest.json"), []byte("{"), 0o644)
	if _, err := runCLI(t, "inspect", ctr); err == nil || !strings.Contains(err.Error(), filepath.Join(ctr, "manifest.json")+": ") || strings.Count(err.Error(), "manifest.json") != 1 {
		t.Errorf("bad manifest: got %v", err)
	}
	// A truncated safetensors file names the file.
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	os.WriteFile(bad, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{'}, 0o644)
	if _, err := runCLI(t, "inspect", bad); err == nil || !strings.Contains(err.Error(), "bad.safetensors") {
		t.Errorf("bad file: got %v", err)
	}
}
