package repack

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// planVersion changes whenever the way a plan is derived from its inputs
// changes, so a journal written by another version is not trusted.
const planVersion = "qpack-repack-plan/1"

// SourceShard is one safetensors file of the source checkpoint, as planning
// sees it: its name, size, parsed header and (when the Hub says) its sha256.
type SourceShard struct {
	Name   string
	Size   int64
	Header *safetensors.Header
	SHA256 string
}

// SkippedTensor is a source tensor that does not go into the container.
type SkippedTensor struct {
	Name   string `json:"name"`
	Shard  string `json:"shard"`
	Reason string `json:"reason"`
	Bytes  int64  `json:"bytes"`
}

// DenseTensor is a tensor copied unchanged into model.safetensors.
type DenseTensor struct {
	Shard int                // index into Plan.Shards
	Src   safetensors.Tensor // where it is in the source shard
	Dst   safetensors.Tensor // where it goes in model.safetensors
}

// ExpertTensor is one stacked [E, ...] source tensor: section Section of
// layer Layer for every expert.
type ExpertTensor struct {
	Layer   int
	Section int // index into Plan.Layout.Sections
	Shard   int
	Src     safetensors.Tensor
}

// Plan is every byte the container will hold and where it comes from.
type Plan struct {
	Config     *ModelConfig
	Shards     []SourceShard
	Layout     *qpack.Layout
	QuantBits  int // of the routed experts; 0 when they are not quantized
	QuantGroup int
	Dense      []DenseTensor // sorted by name
	DenseFile  *safetensors.Plan
	DenseSpecs []safetensors.Spec
	DenseMeta  map[string]string
	Experts    []ExpertTensor // sorted by layer, then section
	Skipped    []SkippedTensor
}

// Copy is one contiguous run of source bytes and where it lands.
type Copy struct {
	Shard  int    // index into Plan.Shards
	SrcOff int64  // absolute offset in the shard
	Len    int64  //
	File   string // container-relative destination ("model.safetensors", "packed_experts/layer_00.bin")
	DstOff int64
	// What it is, for messages: a dense tensor name, or layer/expert/section.
	Tensor  string
	Layer   int // -1 for dense tensors
	Expert  int
	Section string
}

// expertName matches stacked routed-expert tensors as mlx-lm writes them:
// "<anything>layers.<L>.<module path>.switch_mlp|switch_glu.<proj>.<part>".
var expertName = regexp.MustCompile(`^(.*\.)?layers\.(\d+)\.(?:.+\.)?(switch_mlp|switch_glu)\.([A-Za-z0-9_]+)\.(weight|scales|biases)$`)

// skipReason says why a tensor is left out of the container, or "".
func skipReason(name string) string {
	switch {
	case strings.HasPrefix(name, "mtp.") || strings.Contains(name, ".mtp."):
		return "multi-token-prediction head (not used by the runner)"
	case strings.HasPrefix(name, "vision_tower.") || strings.Contains(name, ".vision_tower.") ||
		strings.HasPrefix(name, "model.visual.") || strings.Contains(name, ".visual."):
		return "vision tower (text-only runner)"
	case strings.HasPrefix(name, "embed_vision.") || strings.Contains(name, ".embed_vision."):
		return "vision embedding projection (text-only runner)" // Gemma 4 multimodal conversions
	case strings.HasPrefix(name, "audio_tower.") || strings.Contains(name, ".audio_tower."):
		return "audio tower (text-only runner)"
	case strings.HasPrefix(name, "embed_audio.") || strings.Contains(name, ".embed_audio."):
		return "audio embedding projection (text-only runner)"
	}
	return ""
}

// BuildPlan derives the container plan from the source's config.json and
// shard headers. Every inconsistency is an error here, before any byte is
// written.
func BuildPlan(cfg *ModelConfig, shards []SourceShard) (*Plan, error) {
	if len(shards) == 0 {
		return nil, fmt.Errorf("the source has no safetensors shards")
	}
	p := &Plan{Config: cfg, Shards: shards, DenseMeta: map[string]string{"format": "mlx"}}

	// layer -> section name -> tensor
	perLayer := map[int]map[string]stacked{}
	seen := map[string]string{}
	var dense []DenseTensor
	for si, sh := range shards {
		if sh.Header == nil {
			return nil, fmt.Errorf("%s: no header", sh.Name)
		}
		for _, t := range sh.Header.Tensors {
			if prev, dup := seen[t.Name]; dup {
				return nil, fmt.Errorf("tensor %q is in both %s and %s", t.Name, prev, sh.Name)
			}
			seen[t.Name] = sh.Name
			if r := skipReason(t.Name); r != "" {
				p.Skipped = append(p.Skipped, SkippedTensor{Name: t.Name, Shard: sh.Name, Reason: r, Bytes: t.Size})
				continue
			}
			if m := expertName.FindStringSubmatch(t.Name); m != nil {
				layer, err := strconv.Atoi(m[2])
				if err != nil || layer >= cfg.Layers {
					return nil, fmt.Errorf("%s: tensor %q: layer %s is outside the config's %d layers", sh.Name, t.Name, m[2], cfg.Layers)
				}
				sec := m[4] + "." + m[5]
				if perLayer[layer] == nil {
					perLayer[layer] = map[string]stacked{}
				}
				if _, dup := perLayer[layer][sec]; dup {
					return nil, fmt.Errorf("%s: tensor %q: layer %d has two %s expert tensors", sh.Name, t.Name, layer, sec)
				}
				perLayer[layer][sec] = stacked{si, t}
				continue
			}
			dense = append(dense, DenseTensor{Shard: si, Src: t})
		}
	}
	if len(perLayer) == 0 {
		return nil, fmt.Errorf("no stacked routed-expert tensors (*.switch_mlp.* or *.switch_glu.*) found: " +
			"this is not an MLX (mlx-lm) MoE checkpoint; convert it with mlx_lm.convert first")
	}

	// The section table comes from layer 0 and every layer must match it.
	first, ok := perLayer[0]
	if !ok {
		return nil, fmt.Errorf("layer 0 has no routed-expert tensors")
	}
	names := sortedSections(first)
	E := cfg.Experts
	var specs []qpack.SectionSpec
	for _, n := range names {
		t := first[n].t
		if len(t.Shape) < 2 {
			return nil, fmt.Errorf("%s: tensor %q has shape %v; a stacked expert tensor needs [E, ...]", shards[first[n].shard].Name, t.Name, t.Shape)
		}
		if E == 0 {
			E = int(t.Shape[0])
		}
		specs = append(specs, qpack.SectionSpec{Name: n, DType: t.DType, Shape: append([]int64(nil), t.Shape[1:]...)})
	}
	for l := 0; l < cfg.Layers; l++ {
		secs, ok := perLayer[l]
		if !ok {
			return nil, fmt.Errorf("layer %d has no routed-expert tensors; a .qpack v1 needs the same experts in every layer", l)
		}
		if got := sortedSections(secs); strings.Join(got, ",") != strings.Join(names, ",") {
			return nil, fmt.Errorf("layer %d has expert sections [%s] but layer 0 has [%s]", l, strings.Join(got, " "), strings.Join(names, " "))
		}
		for i, n := range names {
			s := secs[n]
			t := s.t
			where := fmt.Sprintf("%s: tensor %q", shards[s.shard].Name, t.Name)
			if len(t.Shape) < 1 || t.Shape[0] != int64(E) {
				return nil, fmt.Errorf("%s: shape %v does not start with the %d experts of the config", where, t.Shape, E)
			}
			if t.DType != specs[i].DType || !equalShape(t.Shape[1:], specs[i].Shape) {
				return nil, fmt.Errorf("%s: %s %v per expert differs from layer 0's %s %v", where, t.DType, t.Shape[1:], specs[i].DType, specs[i].Shape)
			}
			if t.Size%int64(E) != 0 {
				return nil, fmt.Errorf("%s: %d bytes do not divide evenly by %d experts", where, t.Size, E)
			}
			p.Experts = append(p.Experts, ExpertTensor{Layer: l, Section: i, Shard: s.shard, Src: t})
		}
	}
	layout, err := qpack.NewLayout(E, cfg.Layers, cfg.Linear, specs)
	if err != nil {
		return nil, fmt.Errorf("expert layout: %w", err)
	}
	p.Layout = layout
	if err := p.resolveQuant(); err != nil {
		return nil, err
	}

	sort.Slice(dense, func(i, j int) bool { return dense[i].Src.Name < dense[j].Src.Name })
	for _, d := range dense {
		p.DenseSpecs = append(p.DenseSpecs, safetensors.Spec{Name: d.Src.Name, DType: d.Src.DType, Shape: d.Src.Shape})
	}
	df, err := safetensors.PlanFile(p.DenseSpecs, p.DenseMeta)
	if err != nil {
		return nil, fmt.Errorf("model.safetensors: %w", err)
	}
	for i := range dense {
		dense[i].Dst = df.Tensors[i]
	}
	p.Dense, p.DenseFile = dense, df
	return p, nil
}

// resolveQuant works out the experts' quantization from their shapes and
// checks it against what config.json declares. Every projection must be
// quantized the same way (MLX affine: U32 packed weights, float scales and
// biases of one dtype and shape) or none may be.
func (p *Plan) resolveQuant() error {
	quantized, plain := 0, 0
	for _, proj := range qpack.Projections {
		w, okW := p.Layout.Section(proj + ".weight")
		s, okS := p.Layout.Section(proj + ".scales")
		b, okB := p.Layout.Section(proj + ".biases")
		if !okW {
			continue
		}
		// The layer-0 module path, for messages and per-module overrides.
		module := proj
		for _, e := range p.Experts {
			if e.Layer == 0 && p.Layout.Sections[e.Section].Name == proj+".weight" {
				module = strings.TrimSuffix(e.Src.Name, ".weight")
			}
		}
		if !okS {
			if okB {
				return fmt.Errorf("%s: has biases but no scales", module)
			}
			plain++
			continue
		}
		quantized++
		if !okB {
			return fmt.Errorf("%s: has scales but no biases; MLX affine quantization stores both", module)
		}
		if w.DType != safetensors.U32 {
			return fmt.Errorf("%s: quantized weight has dtype %s, want U32 (packed)", module, w.DType)
		}
		switch s.DType {
		case safetensors.BF16, safetensors.F16, safetensors.F32:
		default:
			return fmt.Errorf("%s: scales have dtype %s, want a float type", module, s.DType)
		}
		if b.DType != s.DType || !equalShape(b.Shape, s.Shape) {
			return fmt.Errorf("%s: biases %s %v do not match scales %s %v", module, b.DType, b.Shape, s.DType, s.Shape)
		}
		n := len(w.Shape)
		if n < 1 || len(s.Shape) != n || !equalShape(w.Shape[:n-1], s.Shape[:n-1]) {
			return fmt.Errorf("%s: weight shape %v and scales shape %v do not go together", module, w.Shape, s.Shape)
		}
		bitsDecl, group := p.Config.quantFor(module)
		wcols, scols := w.Shape[n-1], s.Shape[n-1]
		if group <= 0 {
			return fmt.Errorf("%s: experts are quantized (they have scales) but config.json declares no group size", module)
		}
		if wcols <= 0 || scols <= 0 {
			return fmt.Errorf("%s: empty quantized weight (shape %v, scales %v)", module, w.Shape, s.Shape)
		}
		num := 32 * wcols
		den := scols * int64(group)
		if num%den != 0 {
			return fmt.Errorf("%s: packed width %d and %d scale groups of %d do not give a whole bit width", module, wcols, scols, group)
		}
		bits := int(num / den)
		switch bits {
		case 2, 3, 4, 5, 6, 8:
		default:
			return fmt.Errorf("%s: shapes imply %d-bit quantization with group %d, which MLX does not use", module, bits, group)
		}
		if bitsDecl != 0 && bitsDecl != bits {
			return fmt.Errorf("%s: config.json declares %d-bit but the tensor shapes are %d-bit (group %d)", module, bitsDecl, bits, group)
		}
		if p.QuantBits != 0 && (p.QuantBits != bits || p.QuantGroup != group) {
			return fmt.Errorf("%s: %d-bit group %d, but another projection is %d-bit group %d; a .qpack v1 records one quantization for all experts", module, bits, group, p.QuantBits, p.QuantGroup)
		}
		p.QuantBits, p.QuantGroup = bits, group
	}
	if quantized > 0 && plain > 0 {
		return fmt.Errorf("some expert projections are quantized and some are not; a .qpack v1 needs one quantization for all")
	}
	return nil
}

// stacked is one stacked expert tensor found in a shard.
type stacked struct {
	shard int
	t     safetensors.Tensor
}

func sortedSections(m map[string]stacked) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	rank := func(n string) (int, int, string) {
		proj, part, _ := strings.Cut(n, ".")
		pr := len(qpack.Projections)
		for i, q := range qpack.Projections {
			if q == proj {
				pr = i
			}
		}
		pa := len(qpack.SectionParts)
		for i, q := range qpack.SectionParts {
			if q == part {
				pa = i
			}
		}
		return pr, pa, n
	}
	sort.Slice(out, func(i, j int) bool {
		a1, a2, a3 := rank(out[i])
		b1, b2, b3 := rank(out[j])
		if a1 != b1 {
			return a1 < b1
		}
		if a2 != b2 {
			return a2 < b2
		}
		return a3 < b3
	})
	return out
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Copies lists every copy of the plan, sorted by shard and source offset:
// one per dense tensor and one per (layer, section, expert).
func (p *Plan) Copies() []Copy {
	var out []Copy
	for _, d := range p.Dense {
		out = append(out, Copy{Shard: d.Shard, SrcOff: d.Src.Offset, Len: d.Src.Size, File: qpack.DenseName,
			DstOff: d.Dst.Offset, Tensor: d.Src.Name, Layer: -1})
	}
	E := int64(p.Layout.ExpertCount)
	for _, x := range p.Experts {
		sec := p.Layout.Sections[x.Section]
		per := x.Src.Size / E
		file := qpack.LayerFile(x.Layer)
		for e := int64(0); e < E; e++ {
			out = append(out, Copy{Shard: x.Shard, SrcOff: x.Src.Offset + e*per, Len: per, File: file,
				DstOff: e*p.Layout.ExpertStride + sec.Offset, Tensor: x.Src.Name, Layer: x.Layer, Expert: int(e), Section: sec.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Shard != out[j].Shard {
			return out[i].Shard < out[j].Shard
		}
		return out[i].SrcOff < out[j].SrcOff
	})
	return out
}

// DenseBytes is the size of model.safetensors.
func (p *Plan) DenseBytes() int64 { return p.DenseFile.Size }

// ExpertBytes is the size of all layer files together.
func (p *Plan) ExpertBytes() int64 { return int64(p.Layout.LayerCount) * p.Layout.LayerSize() }

// SourceBytes is the size of all source shards together.
func (p *Plan) SourceBytes() int64 {
	var n int64
	for _, s := range p.Shards {
		n += s.Size
	}
	return n
}

// SkippedBytes is the size of the source tensors left out.
func (p *Plan) SkippedBytes() int64 {
	var n int64
	for _, s := range p.Skipped {
		n += s.Bytes
	}
	return n
}

// Fingerprint identifies the plan: the same inputs give the same
// fingerprint, and any change of source shards, layout or dense file gives
// another. A resume journal is bound to it.
func (p *Plan) Fingerprint() string {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(planVersion)
	for _, s := range p.Shards {
		put(s.Name)
		put(strconv.FormatInt(s.Size, 10))
		put(s.SHA256)
	}
	lj, _ := p.Layout.Marshal()
	put(string(lj))
	put(string(p.DenseFile.Header))
	for _, d := range p.Dense {
		put(fmt.Sprintf("%d:%d:%d", d.Shard, d.Src.Offset, d.Src.Size))
	}
	for _, x := range p.Experts {
		put(fmt.Sprintf("%d:%d:%d:%d:%d", x.Layer, x.Section, x.Shard, x.Src.Offset, x.Src.Size))
	}
	return hex.EncodeToString(h.Sum(nil))
}
