package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// realisticHeader builds a file shaped like one MLX 4-bit MoE shard: per
// layer, stacked expert weights (U32), their scales and biases (BF16),
// attention and norm tensors.
func realisticHeader(b *testing.B) []byte {
	var specs []Spec
	for l := 0; l < 48; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, proj := range []string{"gate_proj", "up_proj", "down_proj"} {
			specs = append(specs,
				Spec{p + "mlp.switch_mlp." + proj + ".weight", U32, []int64{512, 512, 256}},
				Spec{p + "mlp.switch_mlp." + proj + ".scales", BF16, []int64{512, 512, 32}},
				Spec{p + "mlp.switch_mlp." + proj + ".biases", BF16, []int64{512, 512, 32}},
				Spec{p + "mlp.shared_expert." + proj + ".weight", U32, []int64{512, 256}},
			)
		}
		for _, n := range []string{"q_proj", "k_proj", "v_proj", "o_proj"} {
			specs = append(specs, Spec{p + "self_attn." + n + ".weight", U32, []int64{2048, 256}},
				Spec{p + "self_attn." + n + ".scales", BF16, []int64{2048, 32}})
		}
		specs = append(specs, Spec{p + "input_layernorm.weight", BF16, []int64{2048}},
			Spec{p + "post_attention_layernorm.weight", BF16, []int64{2048}})
	}
	p, err := PlanFile(specs, map[string]string{"format": "mlx"})
	if err != nil {
		b.Fatal(err)
	}
	return p.Header
}

// sizedReaderAt serves a header and pretends the file is size bytes long.
type sizedReaderAt struct{ hdr []byte }

func (r sizedReaderAt) ReadAt(p []byte, off int64) (int, error) {
	return copy(p, r.hdr[off:]), nil
}

// BenchmarkReadHeader times ReadHeader (parse + full validation) on a
// realistic header and, in the same run, the baseline of merely decoding
// the same JSON with encoding/json into a map (no validation); it reports
// the ratio ours/baseline.
func BenchmarkReadHeader(b *testing.B) {
	hdr := realisticHeader(b)
	h, err := ReadHeader(sizedReaderAt{hdr}, 1<<40, "bench")
	if err != nil {
		b.Fatal(err)
	}
	size := h.Tensors[len(h.Tensors)-1].Offset + h.Tensors[len(h.Tensors)-1].Size
	var ours, base time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := ReadHeader(sizedReaderAt{hdr}, size, "bench"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(hdr[8:]))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		ours += t1.Sub(t0)
		base += t2.Sub(t1)
	}
	b.ReportMetric(float64(len(h.Tensors)), "tensors")
	b.ReportMetric(float64(len(hdr)), "header_bytes")
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ours_ns/op")
	b.ReportMetric(float64(ours)/float64(base), "x_encoding_json_map")
}
