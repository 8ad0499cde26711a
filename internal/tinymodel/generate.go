package tinymodel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/safetensors"
)

// IndexFile is the name of the shard index of a sharded checkpoint.
const IndexFile = "model.safetensors.index.json"

// shardMetadata is the safetensors metadata mlx-lm writes in every file.
var shardMetadata = map[string]string{"format": "mlx"}

// outTensor is one tensor as it goes into a safetensors file.
type outTensor struct {
	spec safetensors.Spec
	data []byte
}

// Generate writes the tiny checkpoint s into dir (created if missing):
// config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json, and model.safetensors or, with Shards > 1,
// model-0000i-of-0000N.safetensors plus model.safetensors.index.json.
// Safetensors files and an index already in dir are removed first, so a
// stale shard set cannot linger. The output is a pure function of s.
func Generate(dir string, s Spec) error {
	tensors, overrides, err := modelTensors(s)
	if err != nil {
		return err
	}
	return writeCheckpoint(dir, tensors, s.Shards, func(tok *tokenizer) (config, generation any) {
		return modelConfig(s, overrides, tok), generationConfig(s, tok)
	})
}

// writeCheckpoint writes a checkpoint's files into dir (created if
// missing): the tensors as model.safetensors or shards with an index, the
// tiny tokenizer, and the config.json and generation_config.json that
// configs returns for that tokenizer. Safetensors files and an index
// already in dir are removed first.
func writeCheckpoint(dir string, tensors []outTensor, shards int, configs func(*tokenizer) (config, generation any)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	if err := removeCheckpointFiles(dir); err != nil {
		return err
	}
	if err := writeShards(dir, tensors, shards); err != nil {
		return err
	}
	tok, err := buildTokenizer()
	if err != nil {
		return err
	}
	config, generation := configs(tok)
	files := []struct {
		name string
		v    any
	}{
		{"config.json", config},
		{"generation_config.json", generation},
		{"tokenizer.json", tok.json()},
		{"tokenizer_config.json", tok.configJSON()},
	}
	for _, f := range files {
		if err := writeJSON(filepath.Join(dir, f.name), f.v); err != nil {
			return err
		}
	}
	return nil
}

// modelTensors returns the tensors of s sorted by name, with the names of
// the per-tensor quantization overrides.
func modelTensors(s Spec) (tensors []outTensor, overrides []string, err error) {
	if err := s.validate(); err != nil {
		return nil, nil, err
	}
	weights := floatModel(s)
	if s.Bits == 0 {
		tensors = encodeF32(weights)
	} else {
		tensors, overrides, err = quantizeModel(s, weights)
		if err != nil {
			return nil, nil, err
		}
	}
	slices.SortFunc(tensors, func(a, b outTensor) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	return tensors, overrides, nil
}

// removeCheckpointFiles deletes the safetensors files and index a previous
// generation may have left in dir (only names this package writes).
func removeCheckpointFiles(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		if n == safetensors.SingleFile || n == IndexFile ||
			(strings.HasPrefix(n, "model-") && strings.HasSuffix(n, ".safetensors")) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("tinymodel: removing stale %w", err)
			}
		}
	}
	return nil
}

func shape64(shape []int) []int64 {
	s := make([]int64, len(shape))
	for i, v := range shape {
		s[i] = int64(v)
	}
	return s
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// encodeF32 stores every tensor as F32.
func encodeF32(ws []floatTensor) []outTensor {
	out := make([]outTensor, len(ws))
	for i, w := range ws {
		out[i] = outTensor{
			spec: safetensors.Spec{Name: w.name, DType: safetensors.F32, Shape: shape64(w.shape)},
			data: f32Bytes(w.vals),
		}
	}
	return out
}

// shardName is the file name of shard i (0-based) of n.
func shardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n) }

// splitShards assigns sorted tensors to n shards of roughly equal byte size,
// in order, every shard non-empty. It returns the first tensor index of each
// shard.
func splitShards(sizes []int64, n int) ([]int, error) {
	if n > len(sizes) {
		return nil, fmt.Errorf("tinymodel: %d shards for %d tensors", n, len(sizes))
	}
	var total int64
	for _, s := range sizes {
		total += s
	}
	starts := []int{0}
	var cum int64
	for i, s := range sizes {
		// Start the next shard at tensor i when the bytes before it reach
		// that shard's share, or when exactly one tensor per remaining
		// shard is left.
		k := len(starts)
		if k < n && i > starts[k-1] && (cum*int64(n) >= total*int64(k) || len(sizes)-i == n-k) {
			starts = append(starts, i)
		}
		cum += s
	}
	if len(starts) != n {
		return nil, fmt.Errorf("tinymodel: could not split %d tensors into %d shards", len(sizes), n)
	}
	return starts, nil
}

func writeShards(dir string, ts []outTensor, n int) error {
	if n <= 1 {
		return writeSafetensors(filepath.Join(dir, safetensors.SingleFile), ts)
	}
	sizes := make([]int64, len(ts))
	for i, t := range ts {
		sizes[i] = int64(len(t.data))
	}
	starts, err := splitShards(sizes, n)
	if err != nil {
		return err
	}
	starts = append(starts, len(ts))
	weightMap := map[string]string{}
	var total int64
	for k := range n {
		part := ts[starts[k]:starts[k+1]]
		name := shardName(k, n)
		if err := writeSafetensors(filepath.Join(dir, name), part); err != nil {
			return err
		}
		for _, t := range part {
			weightMap[t.spec.Name] = name
			total += int64(len(t.data))
		}
	}
	index := obj{
		{"metadata", obj{{"total_size", total}}},
		{"weight_map", weightMap}, // encoding/json sorts map keys
	}
	return writeJSON(filepath.Join(dir, IndexFile), index)
}

func writeSafetensors(path string, ts []outTensor) error {
	specs := make([]safetensors.Spec, len(ts))
	for i, t := range ts {
		specs[i] = t.spec
	}
	err := safetensors.WriteFile(path, specs, shardMetadata, func(i int, _ safetensors.Spec) (io.Reader, error) {
		return bytes.NewReader(ts[i].data), nil
	})
	if err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	return nil
}

// obj is a JSON object that keeps its key order.
type obj []kv

type kv struct {
	K string
	V any
}

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshalNoEscape(p.K)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := marshalNoEscape(p.V)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", p.K, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshalNoEscape is json.Marshal without HTML escaping (so "<|im_end|>"
// stays readable, as Python's json writes it).
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// writeJSON writes v indented by two spaces, with a final newline.
func writeJSON(path string, v any) error {
	raw, err := marshalNoEscape(v)
	if err != nil {
		return fmt.Errorf("tinymodel: %s: %w", path, err)
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return fmt.Errorf("tinymodel: %s: %w", path, err)
	}
	b.WriteByte('\n')
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	return nil
}
