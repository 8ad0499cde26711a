package synthetic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// WriteCheckpoint writes m as an MLX checkpoint directory: config.json and
// the tensors in one model.safetensors (shards <= 1) or split over shards
// files with model.safetensors.index.json.
func (m *Model) WriteCheckpoint(dir string, shards int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), m.Dims.ConfigJSON(), 0o644); err != nil {
		return err
	}
	names := m.Names()
	shards = max(1, min(shards, len(names)))
	weightMap := map[string]string{}
	var total int64
	for s := range shards {
		file := safetensors.SingleFile
		if shards > 1 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		}
		var specs []safetensors.Spec
		for i := s; i < len(names); i += shards {
			t := m.Tensors[names[i]]
			specs = append(specs, safetensors.Spec{Name: names[i], DType: safetensors.DType(t.DType), Shape: t.Shape})
			weightMap[names[i]] = file
			total += int64(len(t.Data))
		}
		err := safetensors.WriteFile(filepath.Join(dir, file), specs, map[string]string{"format": "mlx"},
			func(_ int, sp safetensors.Spec) (io.Reader, error) {
				return bytes.NewReader(m.Tensors[sp.Name].Data), nil
			})
		if err != nil {
			return err
		}
	}
	if shards > 1 {
		ix, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, safetensors.IndexFile), ix, 0o644)
	}
	return nil
}

// WriteContainer writes m as a .qpack container at dst with the qpack
// package's writer: every routed expert as one blob of the layout's
// sections, everything else in model.safetensors, config.json copied.
func (m *Model) WriteContainer(dst string) error {
	cfg := m.Config
	lp := cfg.Prefix
	first := func(l int) string { return fmt.Sprintf("%slayers.%d.mlp.switch_mlp.", lp, l) }
	sparse := 0
	for !cfg.Sparse[sparse] {
		sparse++
	}
	var specs []qpack.SectionSpec
	for _, proj := range qpack.Projections {
		for _, part := range qpack.SectionParts {
			t, ok := m.Tensors[first(sparse)+proj+"."+part]
			if !ok {
				continue
			}
			specs = append(specs, qpack.SectionSpec{Name: proj + "." + part, DType: safetensors.DType(t.DType), Shape: t.Shape[1:]})
		}
	}
	linear := make([]bool, cfg.Layers)
	for l := range linear {
		linear[l] = !cfg.FullAttention[l]
	}
	layout, err := qpack.NewLayout(cfg.Experts, cfg.Layers, linear, specs)
	if err != nil {
		return err
	}
	w, err := qpack.Create(dst, layout, qpack.CreateOptions{})
	if err != nil {
		return err
	}
	defer w.Close()
	var dense []safetensors.Spec
	for _, n := range m.Names() {
		if strings.Contains(n, ".mlp.switch_mlp.") {
			continue
		}
		t := m.Tensors[n]
		dense = append(dense, safetensors.Spec{Name: n, DType: safetensors.DType(t.DType), Shape: t.Shape})
	}
	if _, err := w.CreateDense(dense, map[string]string{"format": "mlx"}); err != nil {
		return err
	}
	for _, s := range dense {
		if err := w.WriteDenseTensor(s.Name, m.Tensors[s.Name].Data, 0); err != nil {
			return err
		}
	}
	E := cfg.Experts
	for l := range cfg.Layers {
		if !cfg.Sparse[l] {
			continue // the layer file stays zero
		}
		for e := range E {
			var blob []byte
			for _, s := range specs {
				d := m.Tensors[first(l)+s.Name].Data
				per := len(d) / E
				blob = append(blob, d[e*per:(e+1)*per]...)
			}
			if err := w.WriteExpert(l, e, blob); err != nil {
				return err
			}
		}
	}
	if err := w.AddFile("config.json", bytes.NewReader(m.Dims.ConfigJSON())); err != nil {
		return err
	}
	_, err = w.Finish(qpack.ManifestInfo{ModelName: cfg.ModelType, SourceCheckpoint: "synthetic"})
	return err
}
