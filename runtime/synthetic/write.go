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
	"github.com/qpack-go/qpack/runtime"
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
	return writeQwenContainer(dst, m.Config, m.Dims.ConfigJSON(), m.Tensors)
}

// StreamContainer draws the model of d from seed, like Generate, and writes
// it as a .qpack container at dst without building the routed experts in
// memory: with d.Unique > 0 only Unique experts per layer are drawn and
// expert e's blob is expert e % Unique's (each written out separately, so
// the file holds every expert's bytes). Memory is the dense weights plus
// Unique experts per sparse layer, not the model; the container computes
// what Generate's model with the same dims and seed computes.
func StreamContainer(dst string, d Dims, seed uint64) error {
	t, err := draw(d, seed, false)
	if err != nil {
		return err
	}
	cfg, err := runtime.ParseConfig(d.ConfigJSON())
	if err != nil {
		return err
	}
	return writeQwenContainer(dst, cfg, d.ConfigJSON(), t)
}

// writeQwenContainer writes tensors holding stacked experts under
// mlp.switch_mlp, possibly fewer entries than cfg.Experts (entry e % n).
func writeQwenContainer(dst string, cfg *runtime.Config, config []byte, t runtime.MapTensors) error {
	module := func(l int) string { return fmt.Sprintf("%slayers.%d.mlp.switch_mlp.", cfg.Prefix, l) }
	dense := runtime.MapTensors{}
	for n, x := range t {
		if !strings.Contains(n, ".mlp.switch_mlp.") {
			dense[n] = x
		}
	}
	return writeStacked(dst, cfg, config, dense, func(l int) (runtime.MapTensors, error) {
		out := runtime.MapTensors{}
		for _, proj := range qpack.Projections {
			for _, part := range qpack.SectionParts {
				if x, ok := t[module(l)+proj+"."+part]; ok {
					out[proj+"."+part] = x
				}
			}
		}
		return out, nil
	})
}

// stackedLayer returns layer l's routed experts as stacked tensors keyed by
// section name ("gate_proj.weight"), each of shape [n, ...]: expert e is
// entry e % n. It is called once per sparse layer, in order, so a generator
// may draw a layer's experts only when asked.
type stackedLayer func(l int) (runtime.MapTensors, error)

// writeStacked writes a container: dense in model.safetensors, each sparse
// layer's experts from experts(l) as blobs of the layout's sections (those
// of the first sparse layer, in qpack.Projections × qpack.SectionParts
// order), config as config.json. Only one layer's experts are held at once.
func writeStacked(dst string, cfg *runtime.Config, config []byte, dense runtime.MapTensors, experts stackedLayer) error {
	sparse := -1
	for l := range cfg.Layers {
		if cfg.Sparse[l] {
			sparse = l
			break
		}
	}
	if sparse < 0 {
		return fmt.Errorf("synthetic: no sparse layer to write experts of")
	}
	first, err := experts(sparse)
	if err != nil {
		return err
	}
	var specs []qpack.SectionSpec
	for _, proj := range qpack.Projections {
		for _, part := range qpack.SectionParts {
			if t, ok := first[proj+"."+part]; ok {
				specs = append(specs, qpack.SectionSpec{Name: proj + "." + part, DType: safetensors.DType(t.DType), Shape: t.Shape[1:]})
			}
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
	var ds []safetensors.Spec
	for _, n := range (&Model{Tensors: dense}).Names() {
		t := dense[n]
		ds = append(ds, safetensors.Spec{Name: n, DType: safetensors.DType(t.DType), Shape: t.Shape})
	}
	if _, err := w.CreateDense(ds, map[string]string{"format": "mlx"}); err != nil {
		return err
	}
	for _, s := range ds {
		if err := w.WriteDenseTensor(s.Name, dense[s.Name].Data, 0); err != nil {
			return err
		}
	}
	blob := make([]byte, 0, layout.ExpertStride)
	for l := range cfg.Layers {
		if !cfg.Sparse[l] {
			continue // the layer file stays zero
		}
		stacked := first
		if l != sparse {
			if stacked, err = experts(l); err != nil {
				return err
			}
		}
		for e := range cfg.Experts {
			blob = blob[:0]
			for _, s := range specs {
				t, ok := stacked[s.Name]
				if !ok || len(t.Shape) == 0 || t.Shape[0] <= 0 {
					return fmt.Errorf("synthetic: layer %d: no stacked experts for section %s", l, s.Name)
				}
				n := int(t.Shape[0])
				per := len(t.Data) / n
				i := e % n
				blob = append(blob, t.Data[i*per:(i+1)*per]...)
			}
			if err := w.WriteExpert(l, e, blob); err != nil {
				return err
			}
		}
		first = nil
	}
	if err := w.AddFile("config.json", bytes.NewReader(config)); err != nil {
		return err
	}
	_, err = w.Finish(qpack.ManifestInfo{ModelName: cfg.ModelType, SourceCheckpoint: "synthetic"})
	return err
}
