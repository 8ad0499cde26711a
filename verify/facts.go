package verify

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/qpack-go/qpack/modelconfig"
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
	quantBitsAllowed  = modelconfig.QuantBitsAllowed
	quantGroupAllowed = modelconfig.QuantGroupAllowed
)

// maxConfigSize bounds config.json read from a container.
const maxConfigSize = modelconfig.MaxBytes

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
	data, cfg := v.readConfig()
	if cfg == nil {
		return
	}
	v.checkRunnable(data)
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
	dq, err := declaredQuant(data, prefix, found, sectionProjections(v.layout))
	if err != nil {
		v.note("%s: %v: quantBits and quantGroupSize not checked against it", configName, err)
		return
	}
	for _, p := range dq.check(v.man.QuantBits, v.man.QuantGroupSize) {
		bad(p.key, "%s", p.msg)
	}
}

// readConfig returns config.json's bytes and top-level object, or nil
// (with a note) when there is none to trust: absent, damaged (its digest
// does not match; the digest pass reports that), too large, or not a JSON
// object.
func (v *verifier) readConfig() ([]byte, map[string]json.RawMessage) {
	if _, listed := v.man.Files[configName]; !listed {
		v.note("the container holds no %s: modelName, quantBits and quantGroupSize are checked against the layout only", configName)
		return nil, nil
	}
	if _, ok := v.stats[configName]; !ok {
		return nil, nil // missing or wrong size: reported
	}
	data, err := v.readBounded(configName, maxConfigSize)
	if err != nil {
		v.note("%v: not checked against the manifest", err)
		return nil, nil
	}
	if v.man.Ext != nil {
		sum := blake3.Sum256(data)
		if hex.EncodeToString(sum[:]) != v.man.Ext.FileDigests[configName] {
			return nil, nil // the digest pass reports it
		}
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil || cfg == nil {
		v.note("%s is not a JSON object: the manifest is not checked against it", configName)
		return nil, nil
	}
	return data, cfg
}

// checkRunnable parses config.json as the runner does (package
// modelconfig): a container whose config the runner refuses is unusable,
// each problem named by its field. The config is also checked against the
// layout (layers, experts, which layers are linear attention) and the
// dense tensors (vocab_size against the embedding rows, ...).
func (v *verifier) checkRunnable(data []byte) {
	bad := func(key, msg string) {
		v.problem(Problem{Scope: ScopeContainer, Kind: KindStructure, File: configName, Key: key, Message: msg})
	}
	mc, err := modelconfig.Parse(data, configName)
	if err != nil {
		var list modelconfig.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				c := *e
				c.File, c.Field = "", ""
				bad(e.Field, c.Error()+": the runner cannot run this model")
			}
			return
		}
		bad("", err.Error())
		return
	}
	if l := v.layout; l != nil {
		field := func(k string) string {
			if mc.Nested {
				return "text_config." + k
			}
			return k
		}
		if l.LayerCount != mc.Layers {
			bad(field("num_hidden_layers"), fmt.Sprintf("%d, but %s has %d layers", mc.Layers, qpack.LayoutName, l.LayerCount))
		} else if len(l.LinearLayers) == mc.Layers {
			for i, lin := range l.LinearLayers {
				if lin == mc.FullAttention[i] {
					kind := map[bool]string{true: "full attention", false: "linear attention"}
					bad(field("layer_types"), fmt.Sprintf("layer %d is %s, but %s has it as %s", i, kind[mc.FullAttention[i]], qpack.LayoutName, kind[!lin]))
					break
				}
			}
		}
		if l.ExpertCount != mc.Experts {
			bad(field("num_experts"), fmt.Sprintf("%d, but %s has %d experts per layer", mc.Experts, qpack.LayoutName, l.ExpertCount))
		}
	}
	if v.dense != nil {
		err := mc.CheckTensors(configName, func(name string) ([]int64, bool) {
			t, ok := v.dense.Tensor(name)
			return t.Shape, ok
		})
		var list modelconfig.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				bad(e.Field, e.Msg+" in "+qpack.DenseName)
			}
		}
	}
}

// CheckConfig refuses a container whose config.json the runner cannot run
// (the error wraps modelconfig.ErrConfig), reading nothing else: a caller
// runs it before opening a source for a deep check, so such a container
// costs no source request. A config.json that is absent, unreadable or
// does not match its digest is left to Verify to report (nil here).
func CheckConfig(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil
	}
	defer root.Close()
	read := func(name string, limit int64) []byte {
		if st, err := root.Lstat(name); err != nil || !st.Mode().IsRegular() {
			return nil
		}
		f, err := root.Open(name)
		if err != nil {
			return nil
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, limit+1))
		if err != nil || int64(len(data)) > limit {
			return nil
		}
		return data
	}
	mdata := read(qpack.ManifestName, qpack.MaxManifestSize)
	cdata := read(configName, maxConfigSize)
	if mdata == nil || cdata == nil {
		return nil
	}
	man, err := qpack.ParseManifest(mdata)
	if err != nil {
		return nil
	}
	if man.Ext != nil {
		sum := blake3.Sum256(cdata)
		if hex.EncodeToString(sum[:]) != man.Ext.FileDigests[configName] {
			return nil
		}
	}
	_, err = modelconfig.Parse(cdata, filepath.Join(dir, configName))
	return err
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

// declaredQuant reads the quantization config.json declares (parsed as
// the runner parses it, package modelconfig) for the layer-0 expert
// projections: a per-module entry for "<prefix>layers.0.mlp.switch_mlp.<proj>"
// (or switch_glu), spelled with or without the wrapper prefixes, if there
// is one, else the global bits and group_size. With no prefix known
// (havePrefix false) the bare module path is looked up. Every projection
// must resolve to the same answer.
func declaredQuant(data []byte, prefix string, havePrefix bool, projs []string) (*declQuant, error) {
	q, err := modelconfig.QuantOf(data, configName)
	if err != nil {
		return nil, err
	}
	if !q.Present {
		return &declQuant{where: "no quantization"}, nil
	}
	if !havePrefix {
		prefix = ""
	}
	global := &declQuant{quantized: true, bits: q.Global.Bits, group: q.Global.GroupSize, where: "quantization bits/group_size"}
	var out *declQuant
	for _, proj := range projs {
		d := global
		for _, sw := range []string{"switch_mlp", "switch_glu"} {
			module := prefix + "layers.0.mlp." + sw + "." + proj
			p, ok := q.For(module)
			if ok && p == q.Global {
				continue // no entry of its own (or one equal to the global)
			}
			d = &declQuant{quantized: ok, bits: p.Bits, group: p.GroupSize, where: "quantization[" + module + "]"}
			if !ok {
				d.where += " = false"
			}
			break
		}
		if out != nil && (out.quantized != d.quantized || out.bits != d.bits || out.group != d.group) {
			return nil, fmt.Errorf("quantization declares different quantizations for the expert projections (%s, %s)", out.describe(), d.describe())
		}
		out = d
	}
	if out == nil {
		out = global
	}
	return out, nil
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

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
