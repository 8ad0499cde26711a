package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/safetensors"
)

func init() {
	register(&cli.Command{
		Name:      "inspect",
		Usage:     "describe an MLX checkpoint directory, a safetensors file or a .qpack container",
		ArgsUsage: "PATH",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print a JSON object for scripts"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return withCode(2, fmt.Errorf("inspect: give exactly one PATH"))
			}
			rep, err := inspectPath(c.Args().First())
			if err != nil {
				return withCode(2, err)
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, rep)
			}
			rep.print(c.App.Writer)
			return nil
		},
	})
}

// inspectReport is what inspect prints; its JSON form is for scripts.
type inspectReport struct {
	Path         string         `json:"path"`
	Kind         string         `json:"kind"` // "qpack", "mlx-checkpoint", "safetensors"
	ModelType    string         `json:"model_type,omitempty"`
	Architecture map[string]any `json:"architecture,omitempty"`
	Quantization *quantReport   `json:"quantization,omitempty"`
	Tensors      int            `json:"tensors"`
	Shards       []shardReport  `json:"shards,omitempty"`
	DTypes       map[string]int `json:"dtypes,omitempty"`
	TotalBytes   int64          `json:"total_bytes"`
	DenseBytes   int64          `json:"dense_bytes"`
	ExpertBytes  int64          `json:"expert_bytes"`
	SkippedBytes int64          `json:"skipped_bytes,omitempty"`
	Skipped      []string       `json:"skipped,omitempty"`
	Experts      *expertReport  `json:"experts,omitempty"`
	Layers       []layerReport  `json:"layers,omitempty"`
	Container    *qpackReport   `json:"container,omitempty"`
	Note         string         `json:"note,omitempty"`
}

type quantReport struct {
	Bits        int              `json:"bits"`
	GroupSize   int              `json:"group_size"`
	ExpertBits  int              `json:"expert_bits,omitempty"`
	ExpertGroup int              `json:"expert_group_size,omitempty"`
	Overrides   []overrideReport `json:"overrides,omitempty"`
}

type overrideReport struct {
	Module    string `json:"module"`
	Quantized bool   `json:"quantized"`
	Bits      int    `json:"bits,omitempty"`
	GroupSize int    `json:"group_size,omitempty"`
}

type shardReport struct {
	Name    string `json:"name"`
	Bytes   int64  `json:"bytes"`
	Tensors int    `json:"tensors"`
}

type expertReport struct {
	Count     int             `json:"count"`
	Layers    int             `json:"layers"`
	Payload   int64           `json:"payload_bytes"`
	Stride    int64           `json:"stride"`
	Sections  []qpack.Section `json:"sections"`
	PerLayer  int64           `json:"bytes_per_layer"`
	AllLayers int64           `json:"bytes_all_layers"`
}

type layerReport struct {
	Layer       int    `json:"layer"`
	Kind        string `json:"kind"` // "linear_attention", "full_attention" or "sliding_attention"
	DenseBytes  int64  `json:"dense_bytes"`
	ExpertBytes int64  `json:"expert_bytes"`
}

type qpackReport struct {
	Version          int    `json:"version"`
	ModelName        string `json:"model_name"`
	SourceCheckpoint string `json:"source_checkpoint"`
	Files            int    `json:"files"`
	HasDigests       bool   `json:"has_digests"`
	ToolVersion      string `json:"tool_version,omitempty"`
	SourceRepo       string `json:"source_repo,omitempty"`
	SourceCommit     string `json:"source_commit,omitempty"`
}

func inspectPath(path string) (*inspectReport, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return inspectSafetensors(path)
	}
	if _, err := os.Stat(filepath.Join(path, qpack.ManifestName)); err == nil {
		return inspectContainer(path)
	}
	return inspectCheckpoint(path)
}

func inspectSafetensors(path string) (*inspectReport, error) {
	h, err := safetensors.ReadFileHeader(path)
	if err != nil {
		return nil, err
	}
	rep := &inspectReport{Path: path, Kind: "safetensors", Tensors: len(h.Tensors), TotalBytes: h.FileSize, DTypes: map[string]int{}}
	for _, t := range h.Tensors {
		rep.DTypes[string(t.DType)]++
		rep.DenseBytes += t.Size
	}
	rep.Shards = []shardReport{{Name: filepath.Base(path), Bytes: h.FileSize, Tensors: len(h.Tensors)}}
	return rep, nil
}

// architectureKeys are the config.json fields worth showing.
var architectureKeys = []string{
	"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
	"vocab_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
	"shared_expert_intermediate_size", "linear_num_key_heads", "linear_num_value_heads",
	"linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "full_attention_interval",
	"partial_rotary_factor", "rope_theta", "max_position_embeddings", "tie_word_embeddings",
	// Gemma 4
	"top_k_experts", "intermediate_size", "sliding_window", "global_head_dim", "num_global_key_value_heads",
	"attention_k_eq_v", "final_logit_softcapping",
}

func readArchitecture(data []byte) map[string]any {
	var root map[string]any
	if json.Unmarshal(data, &root) != nil {
		return nil
	}
	text := root
	if tc, ok := root["text_config"].(map[string]any); ok {
		text = tc
	}
	out := map[string]any{}
	for _, k := range architectureKeys {
		if v, ok := text[k]; ok {
			out[k] = v
		}
	}
	if rp, ok := text["rope_parameters"].(map[string]any); ok {
		for _, k := range []string{"rope_theta", "partial_rotary_factor"} {
			if v, ok := rp[k]; ok {
				out[k] = v
			}
		}
	}
	if a, ok := root["architectures"]; ok {
		out["architectures"] = a
	}
	return out
}

func inspectCheckpoint(dir string) (*inspectReport, error) {
	cfgPath := filepath.Join(dir, "config.json")
	if _, err := os.Lstat(cfgPath); err != nil {
		return nil, fmt.Errorf("%s: not a .qpack (no manifest.json) and not a checkpoint: %w", dir, err)
	}
	src, err := checkpoint.OpenDir(dir) // refuses non-regular files without blocking
	if err != nil {
		return nil, err
	}
	defer src.Close()
	data, err := src.ReadFile(context.Background(), "config.json", 16<<20)
	if err != nil {
		return nil, err
	}
	cfg, err := repack.ParseConfig(data, cfgPath)
	if err != nil {
		return nil, err
	}

	rep := &inspectReport{Path: dir, Kind: "mlx-checkpoint", ModelType: cfg.ModelType,
		Architecture: readArchitecture(data), DTypes: map[string]int{}}
	if cfg.QuantBits > 0 || len(cfg.Overrides()) > 0 {
		q := &quantReport{Bits: cfg.QuantBits, GroupSize: cfg.QuantGroup}
		for _, o := range cfg.Overrides() {
			q.Overrides = append(q.Overrides, overrideReport(o))
		}
		rep.Quantization = q
	}
	var shards []repack.SourceShard
	for _, s := range src.Shards() {
		h := s.Header()
		rep.Shards = append(rep.Shards, shardReport{Name: s.Name(), Bytes: h.FileSize, Tensors: len(h.Tensors)})
		rep.TotalBytes += h.FileSize
		rep.Tensors += len(h.Tensors)
		for _, t := range h.Tensors {
			rep.DTypes[string(t.DType)]++
		}
		shards = append(shards, repack.SourceShard{Name: s.Name(), Size: h.FileSize, Header: h})
	}
	plan, err := repack.BuildPlan(cfg, shards)
	if err != nil {
		rep.Note = "cannot be repacked: " + err.Error()
		for _, s := range src.Shards() {
			for _, t := range s.Header().Tensors {
				rep.DenseBytes += t.Size
			}
		}
		return rep, nil
	}
	for _, d := range plan.Dense {
		rep.DenseBytes += d.Src.Size
	}
	for _, x := range plan.Experts {
		rep.ExpertBytes += x.Src.Size
	}
	rep.SkippedBytes = plan.SkippedBytes()
	for _, s := range plan.Skipped {
		rep.Skipped = append(rep.Skipped, s.Name)
	}
	if rep.Quantization != nil && plan.QuantBits > 0 {
		rep.Quantization.ExpertBits, rep.Quantization.ExpertGroup = plan.QuantBits, plan.QuantGroup
	}
	rep.Experts = expertsOf(plan.Layout)
	rep.Layers = layersOf(plan.Layout, attentionKinds(cfg), func(l int) int64 {
		var n int64
		for _, d := range plan.Dense {
			if layerOf(d.Src.Name) == l {
				n += d.Src.Size
			}
		}
		return n
	})
	return rep, nil
}

func inspectContainer(dir string) (*inspectReport, error) {
	c, err := qpack.Open(dir)
	if err != nil {
		return nil, inContainer(dir, err)
	}
	defer c.Close()
	m := c.Manifest
	rep := &inspectReport{Path: dir, Kind: "qpack", ModelType: m.ModelName, DTypes: map[string]int{},
		Tensors: len(c.Dense.Tensors)}
	var kinds []string
	if data, err := os.ReadFile(c.Path("config.json")); err == nil {
		rep.Architecture = readArchitecture(data)
		cfg, err := repack.ParseConfig(data, "config.json")
		if err == nil {
			kinds = attentionKinds(cfg)
		}
		if err == nil && (cfg.QuantBits > 0 || len(cfg.Overrides()) > 0) {
			q := &quantReport{Bits: cfg.QuantBits, GroupSize: cfg.QuantGroup}
			for _, o := range cfg.Overrides() {
				q.Overrides = append(q.Overrides, overrideReport(o))
			}
			rep.Quantization = q
		}
	}
	if m.QuantBits != nil {
		if rep.Quantization == nil {
			rep.Quantization = &quantReport{}
		}
		rep.Quantization.ExpertBits = *m.QuantBits
		if m.QuantGroupSize != nil {
			rep.Quantization.ExpertGroup = *m.QuantGroupSize
		}
	}
	for _, t := range c.Dense.Tensors {
		rep.DTypes[string(t.DType)]++
		rep.DenseBytes += t.Size
	}
	for _, p := range m.SortedFiles() {
		rep.TotalBytes += m.Files[p]
	}
	rep.ExpertBytes = int64(c.Layout.LayerCount) * c.Layout.LayerSize()
	rep.Experts = expertsOf(c.Layout)
	rep.Layers = layersOf(c.Layout, kinds, func(l int) int64 {
		var n int64
		for _, t := range c.Dense.Tensors {
			if layerOf(t.Name) == l {
				n += t.Size
			}
		}
		return n
	})
	q := &qpackReport{Version: m.Version, ModelName: m.ModelName, SourceCheckpoint: m.SourceCheckpoint, Files: len(m.Files)}
	if m.Ext != nil {
		q.HasDigests = len(m.Ext.FileDigests) > 0
		q.ToolVersion = m.Ext.ToolVersion
		q.SourceRepo = m.Ext.Source.Repo
		q.SourceCommit = m.Ext.Source.Commit
	}
	rep.Container = q
	return rep, nil
}

func expertsOf(l *qpack.Layout) *expertReport {
	return &expertReport{Count: l.ExpertCount, Layers: l.LayerCount, Payload: l.Payload(), Stride: l.ExpertStride,
		Sections: l.Sections, PerLayer: l.LayerSize(), AllLayers: int64(l.LayerCount) * l.LayerSize()}
}

// layersOf reports each layer; kinds, when not nil, names the attention
// of each layer (else the layout's linear/full flags do).
func layersOf(l *qpack.Layout, kinds []string, dense func(int) int64) []layerReport {
	out := make([]layerReport, l.LayerCount)
	for i := range out {
		kind := "full_attention"
		if i < len(l.LinearLayers) && l.LinearLayers[i] {
			kind = "linear_attention"
		}
		if i < len(kinds) {
			kind = kinds[i]
		}
		out[i] = layerReport{Layer: i, Kind: kind, DenseBytes: dense(i), ExpertBytes: l.LayerSize()}
	}
	return out
}

// layerOf returns L for a tensor named "...layers.L....", or -1.
func layerOf(name string) int {
	i := strings.Index(name, "layers.")
	if i < 0 || (i > 0 && name[i-1] != '.') {
		return -1
	}
	rest := name[i+len("layers."):]
	n, ok := 0, false
	for _, r := range rest {
		if r < '0' || r > '9' {
			break
		}
		n, ok = n*10+int(r-'0'), true
		if n > 1<<20 {
			return -1
		}
	}
	if !ok {
		return -1
	}
	return n
}

func (r *inspectReport) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "path\t%s\n", r.Path)
	fmt.Fprintf(tw, "kind\t%s\n", r.Kind)
	if r.ModelType != "" {
		fmt.Fprintf(tw, "model type\t%s\n", r.ModelType)
	}
	if len(r.Architecture) > 0 {
		keys := make([]string, 0, len(r.Architecture))
		for k := range r.Architecture {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "  %s\t%v\n", k, r.Architecture[k])
		}
	}
	if q := r.Quantization; q != nil {
		if q.Bits > 0 {
			fmt.Fprintf(tw, "quantization\t%d-bit, group %d (MLX affine)\n", q.Bits, q.GroupSize)
		}
		if q.ExpertBits > 0 {
			fmt.Fprintf(tw, "  routed experts\t%d-bit, group %d\n", q.ExpertBits, q.ExpertGroup)
		}
		if len(q.Overrides) > 0 {
			// Summarize overrides by module suffix (mlp.gate, shared_expert_gate...).
			groups := map[string]int{}
			for _, o := range q.Overrides {
				key := "not quantized"
				if o.Quantized {
					key = fmt.Sprintf("%d-bit g%d", o.Bits, o.GroupSize)
				}
				suffix := o.Module
				if i := strings.Index(suffix, "layers."); i >= 0 {
					if j := strings.IndexByte(suffix[i+7:], '.'); j >= 0 {
						suffix = suffix[i+7+j+1:]
					}
				}
				groups[suffix+": "+key]++
			}
			keys := make([]string, 0, len(groups))
			for k := range groups {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(tw, "  override\t%s (%d modules)\n", k, groups[k])
			}
		}
	}
	fmt.Fprintf(tw, "tensors\t%d\n", r.Tensors)
	if len(r.DTypes) > 0 {
		var parts []string
		for k, v := range r.DTypes {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(parts)
		fmt.Fprintf(tw, "dtypes\t%s\n", strings.Join(parts, ", "))
	}
	if len(r.Shards) > 1 {
		fmt.Fprintf(tw, "shards\t%d\n", len(r.Shards))
	}
	fmt.Fprintf(tw, "total bytes\t%s\n", humanBytes(r.TotalBytes))
	fmt.Fprintf(tw, "dense bytes\t%s\n", humanBytes(r.DenseBytes))
	if r.Experts != nil {
		fmt.Fprintf(tw, "expert bytes\t%s\n", humanBytes(r.ExpertBytes))
	}
	if r.SkippedBytes > 0 {
		fmt.Fprintf(tw, "skipped\t%d tensors, %s (mtp / vision / audio)\n", len(r.Skipped), humanBytes(r.SkippedBytes))
	}
	if e := r.Experts; e != nil {
		fmt.Fprintf(tw, "experts\t%d per layer x %d layers\n", e.Count, e.Layers)
		fmt.Fprintf(tw, "expert payload\t%d B, stride %d B (%d x 16 KiB)\n", e.Payload, e.Stride, e.Stride/qpack.StrideAlign)
		for _, s := range e.Sections {
			fmt.Fprintf(tw, "  %s\t%s %v at %d, %d B\n", s.Name, s.DType, s.Shape, s.Offset, s.Size)
		}
	}
	if len(r.Layers) > 0 {
		fmt.Fprintf(tw, "layer\tkind\tdense\texperts\n")
		for _, l := range r.Layers {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", l.Layer, l.Kind, humanBytes(l.DenseBytes), humanBytes(l.ExpertBytes))
		}
	}
	if c := r.Container; c != nil {
		fmt.Fprintf(tw, "container\tv%d, %d files, digests: %v\n", c.Version, c.Files, c.HasDigests)
		if c.SourceRepo != "" {
			fmt.Fprintf(tw, "  source\t%s@%s\n", c.SourceRepo, c.SourceCommit)
		} else if c.SourceCheckpoint != "" {
			fmt.Fprintf(tw, "  source\t%s\n", c.SourceCheckpoint)
		}
	}
	if r.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", r.Note)
	}
}

// humanBytes is sizeIEC with the exact count, for inspect's tables.
func humanBytes(n int64) string {
	if n < 1024 {
		return sizeIEC(n)
	}
	return fmt.Sprintf("%s (%d B)", sizeIEC(n), n)
}

// inContainer names the container a qpack.Error (whose File is relative to
// the container) comes from: "DIR/manifest.json: unexpected end of JSON"
// rather than "qpack: manifest.json: ...", which does not say which one.
func inContainer(dir string, err error) error {
	var qe *qpack.Error
	if !errors.As(err, &qe) {
		return err
	}
	msg := filepath.Join(dir, filepath.FromSlash(qe.File))
	if qe.Key != "" {
		msg += ": " + qe.Key
	}
	return &containerFileError{msg: msg + ": " + qe.Err.Error(), err: err}
}

type containerFileError struct {
	msg string
	err error
}

func (e *containerFileError) Error() string { return e.msg }
func (e *containerFileError) Unwrap() error { return e.err }
