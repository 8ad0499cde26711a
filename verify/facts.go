package verify

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
	"github.com/zeebo/blake3"
)

// No digest covers manifest.json, so its descriptive fields are checked
// against what the container's other, digest-covered files say:
// quantBits and quantGroupSize against the expert sections of layout.json
// and the quantization config.json declares, modelName against config.json's
// model_type. The free-text fields (sourceCheckpoint, qpack.toolVersion,
// qpack.source) have nothing to be checked against: only the receipt of an
// earlier verification protects them.

// Quantizations MLX affine uses.
var (
	quantBitsAllowed  = []int{2, 3, 4, 5, 6, 8}
	quantGroupAllowed = []int{32, 64, 128}
)

// maxConfigSize bounds config.json read from a container.
const maxConfigSize = 16 << 20

const configName = "config.json"

// checkFacts runs after loadLayout and loadDense.
func (v *verifier) checkFacts() {
	bad := func(key, format string, args ...any) {
		v.problem(Problem{Scope: ScopeContainer, Kind: KindManifest, File: qpack.ManifestName, Key: key,
			Message: fmt.Sprintf(format, args...)})
	}
	if v.rep.VerifiedBefore == "" {
		v.note("no receipt of an earlier verification: %s is covered by no digest; its quantBits, quantGroupSize and modelName are checked against %s and %s, but its free-text fields (sourceCheckpoint, qpack.toolVersion, qpack.source) have nothing to be checked against: only the receipt a passing verification leaves protects them afterwards",
			qpack.ManifestName, qpack.LayoutName, configName)
	}
	var lq *layoutQuant
	if v.layout != nil {
		var err error
		if lq, err = quantOfLayout(v.layout); err != nil {
			v.problem(Problem{Scope: ScopeContainer, Kind: KindStructure, File: qpack.LayoutName, Message: err.Error()})
			lq = nil
		} else {
			for _, p := range lq.check(v.man.QuantBits, v.man.QuantGroupSize) {
				bad(p.key, "%s", p.msg)
			}
		}
	}
	cfg := v.readConfig()
	if cfg == nil {
		return
	}
	if raw, ok := cfg["model_type"]; ok {
		var mt string
		if err := json.Unmarshal(raw, &mt); err != nil {
			v.note("%s: model_type is not a string: modelName not checked", configName)
		} else if mt != v.man.ModelName {
			bad("modelName", "%q, but %s declares model_type %q", v.man.ModelName, configName, mt)
		}
	}
	if v.layout == nil {
		return
	}
	prefix, found := v.modelPrefix()
	dq, err := declaredQuant(cfg, prefix, found, sectionProjections(v.layout))
	if err != nil {
		v.note("%s: %v: quantBits and quantGroupSize not checked against it", configName, err)
		return
	}
	for _, p := range dq.check(v.man.QuantBits, v.man.QuantGroupSize) {
		bad(p.key, "%s", p.msg)
	}
}

// readConfig returns config.json's top-level object, or nil (with a note)
// when there is none to trust: absent, damaged (its digest does not match;
// the digest pass reports that), too large, or not a JSON object.
func (v *verifier) readConfig() map[string]json.RawMessage {
	if _, listed := v.man.Files[configName]; !listed {
		v.note("the container holds no %s: modelName, quantBits and quantGroupSize are checked against the layout only", configName)
		return nil
	}
	if _, ok := v.stats[configName]; !ok {
		return nil // missing or wrong size: reported
	}
	data, err := v.readBounded(configName, maxConfigSize)
	if err != nil {
		v.note("%v: not checked against the manifest", err)
		return nil
	}
	if v.man.Ext != nil {
		sum := blake3.Sum256(data)
		if hex.EncodeToString(sum[:]) != v.man.Ext.FileDigests[configName] {
			return nil // the digest pass reports it
		}
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil || cfg == nil {
		v.note("%s is not a JSON object: the manifest is not checked against it", configName)
		return nil
	}
	return cfg
}

// modelPrefix finds the text before "layers.0.mlp." in the dense tensor
// names ("model." for Qwen3-Next, "language_model.model." for Qwen3.5), the
// prefix of the expert module paths. found is false when there is no single
// answer.
func (v *verifier) modelPrefix() (string, bool) {
	if v.dense == nil {
		return "", false
	}
	const marker = "layers.0.mlp."
	cands := map[string]bool{}
	for _, t := range v.dense.Tensors {
		i := strings.Index(t.Name, marker)
		if i < 0 || (i > 0 && t.Name[i-1] != '.') {
			continue
		}
		cands[t.Name[:i]] = true
	}
	if len(cands) == 1 {
		for p := range cands {
			return p, true
		}
	}
	// Several (say an MTP or vision block also has a layer 0): the
	// language model's ends in "model.".
	var pick []string
	for p := range cands {
		if p == "model." || strings.HasSuffix(p, ".model.") {
			pick = append(pick, p)
		}
	}
	if len(pick) == 1 {
		return pick[0], true
	}
	return "", false
}

// sectionProjections lists the projections of the layout's sections.
func sectionProjections(l *qpack.Layout) []string {
	var out []string
	for _, proj := range qpack.Projections {
		if _, ok := findSection(l, proj+".weight"); ok {
			out = append(out, proj)
		}
	}
	return out
}

func findSection(l *qpack.Layout, name string) (qpack.Section, bool) {
	for _, s := range l.Sections {
		if s.Name == name {
			return s, true
		}
	}
	return qpack.Section{}, false
}

type factProblem struct{ key, msg string }

// layoutQuant is what the expert sections say about quantization.
type layoutQuant struct {
	quantized bool
	// For quantized experts, one entry per projection: bits x group must
	// equal 32 x wcols / scols (in = wcols x 32 / bits = scols x group).
	projs []projShape
}

type projShape struct {
	name         string
	wcols, scols int64
}

// quantOfLayout reads the expert sections. An error is a layout whose
// sections cannot be quantized MLX weights or plain float weights.
func quantOfLayout(l *qpack.Layout) (*layoutQuant, error) {
	lq := &layoutQuant{}
	withScales, without := 0, 0
	for _, proj := range sectionProjections(l) {
		w, _ := findSection(l, proj+".weight")
		s, ok := findSection(l, proj+".scales")
		if !ok {
			without++
			continue
		}
		withScales++
		if w.DType != safetensors.U32 || len(w.Shape) != 2 {
			return nil, fmt.Errorf("section %s.weight: %s %v, but %s.scales exists: quantized weights are U32 [rows, cols]", proj, w.DType, w.Shape, proj)
		}
		if len(s.Shape) != 2 || s.Shape[0] != w.Shape[0] {
			return nil, fmt.Errorf("section %s.scales: shape %v does not match %s.weight %v", proj, s.Shape, proj, w.Shape)
		}
		lq.projs = append(lq.projs, projShape{name: proj, wcols: w.Shape[1], scols: s.Shape[1]})
	}
	if withScales > 0 && without > 0 {
		return nil, fmt.Errorf("%d expert projections have scales and %d do not; a container records one quantization for all", withScales, without)
	}
	lq.quantized = withScales > 0
	return lq, nil
}

func (lq *layoutQuant) check(bits, group *int) []factProblem {
	var out []factProblem
	if !lq.quantized {
		if bits != nil {
			out = append(out, factProblem{"quantBits", fmt.Sprintf("%d, but the expert sections in %s hold unquantized weights (no scales): want absent or null", *bits, qpack.LayoutName)})
		}
		if group != nil {
			out = append(out, factProblem{"quantGroupSize", fmt.Sprintf("%d, but the expert sections in %s hold unquantized weights (no scales): want absent or null", *group, qpack.LayoutName)})
		}
		return out
	}
	ok := true
	if bits == nil {
		out = append(out, factProblem{"quantBits", fmt.Sprintf("absent, but the expert sections in %s are quantized", qpack.LayoutName)})
		ok = false
	} else if !containsInt(quantBitsAllowed, *bits) {
		out = append(out, factProblem{"quantBits", fmt.Sprintf("%d is not one of %v", *bits, quantBitsAllowed)})
		ok = false
	}
	if group == nil {
		out = append(out, factProblem{"quantGroupSize", fmt.Sprintf("absent, but the expert sections in %s are quantized", qpack.LayoutName)})
		ok = false
	} else if !containsInt(quantGroupAllowed, *group) {
		out = append(out, factProblem{"quantGroupSize", fmt.Sprintf("%d is not one of %v", *group, quantGroupAllowed)})
		ok = false
	}
	if !ok {
		return out
	}
	b, g := int64(*bits), int64(*group)
	for _, p := range lq.projs {
		// Dims above 2^50 fit no real model; bounding them keeps the
		// products below from overflowing.
		if p.wcols > 1<<50 || p.scols > 1<<50 || p.wcols*32%b != 0 || p.wcols*32/b != p.scols*g {
			out = append(out, factProblem{"quantBits", fmt.Sprintf("%d with quantGroupSize %d does not fit %s's sections in %s: weight has %d packed columns (%s inputs at %d bits), scales %d columns (%d inputs at group %d)",
				*bits, *group, p.name, qpack.LayoutName, p.wcols, ratio(p.wcols*32, b), *bits, p.scols, p.scols*g, *group)})
			break
		}
	}
	return out
}

func ratio(n, d int64) string {
	if n%d != 0 {
		return fmt.Sprintf("%d/%d", n, d)
	}
	return fmt.Sprint(n / d)
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// declQuant is the quantization config.json declares for the experts.
type declQuant struct {
	quantized   bool
	bits, group int
	where       string // "the global setting", or the module path of the override
}

// declaredQuant reads config.json's "quantization" (or
// "quantization_config") for the layer-0 expert projections: a per-module
// override "<prefix>layers.0.mlp.switch_mlp.<proj>" (or switch_glu) if one
// is present, else the global bits and group_size. With no prefix known
// (havePrefix false) only the global setting is used. Every projection
// must resolve to the same answer.
func declaredQuant(cfg map[string]json.RawMessage, prefix string, havePrefix bool, projs []string) (*declQuant, error) {
	raw, ok := cfg["quantization"]
	key := "quantization"
	if !ok {
		raw, ok = cfg["quantization_config"]
		key = "quantization_config"
	}
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return &declQuant{where: "no quantization"}, nil
	}
	var q map[string]json.RawMessage
	if err := json.Unmarshal(raw, &q); err != nil || q == nil {
		return nil, fmt.Errorf("%s is not an object", key)
	}
	global := &declQuant{quantized: true, where: key + " bits/group_size"}
	if err := intField(q, "bits", &global.bits); err != nil {
		return nil, fmt.Errorf("%s: %v", key, err)
	}
	if err := intField(q, "group_size", &global.group); err != nil {
		return nil, fmt.Errorf("%s: %v", key, err)
	}
	var out *declQuant
	for _, proj := range projs {
		d := global
		if havePrefix {
			for _, sw := range []string{"switch_mlp", "switch_glu"} {
				module := prefix + "layers.0.mlp." + sw + "." + proj
				o, ok := q[module]
				if !ok {
					continue
				}
				var err error
				if d, err = override(o, global, key, module); err != nil {
					return nil, err
				}
				break
			}
		}
		if out != nil && (out.quantized != d.quantized || out.bits != d.bits || out.group != d.group) {
			return nil, fmt.Errorf("%s declares different quantizations for the expert projections (%s, %s)", key, out.describe(), d.describe())
		}
		out = d
	}
	if out == nil {
		out = global
	}
	if out.quantized && (out.bits == 0 || out.group == 0) {
		return nil, fmt.Errorf("%s gives no bits or group_size", out.where)
	}
	return out, nil
}

// override reads one per-module entry: false (not quantized), true (the
// global setting) or an object of bits and group_size (each defaulting to
// the global one).
func override(raw json.RawMessage, global *declQuant, key, module string) (*declQuant, error) {
	where := key + "[" + module + "]"
	switch string(bytes.TrimSpace(raw)) {
	case "false":
		return &declQuant{where: where + " = false"}, nil
	case "true":
		d := *global
		d.where = where
		return &d, nil
	}
	var o map[string]json.RawMessage
	if err := json.Unmarshal(raw, &o); err != nil || o == nil {
		return nil, fmt.Errorf("%s is neither an object nor a boolean", where)
	}
	d := &declQuant{quantized: true, bits: global.bits, group: global.group, where: where}
	if err := intField(o, "bits", &d.bits); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	if err := intField(o, "group_size", &d.group); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	return d, nil
}

// intField sets *dst from an integer field, leaving it when absent or null.
func intField(m map[string]json.RawMessage, k string, dst *int) error {
	raw, ok := m[k]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n <= 0 || n > 1<<20 {
		return fmt.Errorf("%s is not a positive integer: %s", k, truncate(string(raw), 40))
	}
	*dst = n
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func (d *declQuant) describe() string {
	if !d.quantized {
		return d.where + ": not quantized"
	}
	return fmt.Sprintf("%s: %d bits, group %d", d.where, d.bits, d.group)
}

func (d *declQuant) check(bits, group *int) []factProblem {
	var out []factProblem
	show := func(p *int) string {
		if p == nil {
			return "absent"
		}
		return fmt.Sprint(*p)
	}
	if !d.quantized {
		if bits != nil {
			out = append(out, factProblem{"quantBits", fmt.Sprintf("%d, but %s declares the experts unquantized (%s)", *bits, configName, d.where)})
		}
		if group != nil {
			out = append(out, factProblem{"quantGroupSize", fmt.Sprintf("%d, but %s declares the experts unquantized (%s)", *group, configName, d.where)})
		}
		return out
	}
	if bits == nil || *bits != d.bits {
		out = append(out, factProblem{"quantBits", fmt.Sprintf("%s, but %s declares %d (%s)", show(bits), configName, d.bits, d.where)})
	}
	if group == nil || *group != d.group {
		out = append(out, factProblem{"quantGroupSize", fmt.Sprintf("%s, but %s declares %d (%s)", show(group), configName, d.group, d.where)})
	}
	return out
}
