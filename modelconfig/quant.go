package modelconfig

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MLX affine quantization: the bit widths and group sizes its kernels (and
// ours) implement, and the defaults of mlx's to_quantized.
var (
	QuantBitsAllowed  = []int{2, 3, 4, 5, 6, 8}
	QuantGroupAllowed = []int{32, 64, 128}
)

const (
	mlxDefaultBits  = 4
	mlxDefaultGroup = 64
)

// QuantParams are the affine quantization parameters of one module.
type QuantParams struct {
	Bits, GroupSize int
}

// Quantization is the config's "quantization" (or "quantization_config")
// object: a global setting and per-module overrides keyed by module path.
type Quantization struct {
	Present bool
	Global  QuantParams
	// Overrides and Disabled are keyed by module path as the config writes
	// it; Disabled lists modules whose entry is false (kept in float).
	Overrides map[string]QuantParams
	Disabled  map[string]bool

	// canon maps a module path without its wrapper prefixes
	// ("layers.0.mlp.gate") to the key the config uses.
	canon map[string]string
}

// CanonicalModule strips the prefixes converters put before a text
// model's module paths ("language_model.", "model.", and transformers'
// "model.language_model."), so "language_model.model.layers.0.mlp.gate",
// "model.layers.0.mlp.gate" and "layers.0.mlp.gate" are one module.
func CanonicalModule(path string) string {
	for _, p := range []string{"model.language_model.", "language_model.model.", "language_model.", "model."} {
		if strings.HasPrefix(path, p) {
			return path[len(p):]
		}
	}
	return path
}

// For returns the quantization parameters of the module at path (for
// example "model.layers.0.mlp.gate"): its per-module entry if the config
// has one (spelled with or without the wrapper prefixes), else the global
// setting. ok is false when the module is not quantized.
func (q *Quantization) For(module string) (p QuantParams, ok bool) {
	key := module
	if _, exact := q.Overrides[key]; !exact && !q.Disabled[key] {
		if k, found := q.canon[CanonicalModule(module)]; found {
			key = k
		}
	}
	if q.Disabled[key] {
		return QuantParams{}, false
	}
	if p, ok := q.Overrides[key]; ok {
		return p, true
	}
	return q.Global, q.Present
}

// parseQuantization reads the quantization of the config: top-level
// "quantization" (what mlx-lm and mlx-vlm write and mlx-lm reads) or, when
// there is none, "quantization_config" (the transformers name, which mlx-lm
// writes too, identical); or the same keys inside text_config.
func parseQuantization(top, text *Object) Quantization {
	for _, o := range []*Object{top, text} {
		if o == nil {
			continue
		}
		for _, key := range []string{"quantization", "quantization_config"} {
			if o.Has(key) {
				return parseQuantObject(o, key)
			}
		}
	}
	return Quantization{Overrides: map[string]QuantParams{}, Disabled: map[string]bool{}, canon: map[string]string{}}
}

func parseQuantObject(parent *Object, key string) Quantization {
	q := Quantization{Overrides: map[string]QuantParams{}, Disabled: map[string]bool{}, canon: map[string]string{}}
	o := parent.OptObject(key)
	if o == nil {
		return q
	}
	if m := o.OptString("quant_method"); m != "" || o.Has("quant_method") {
		o.Fail("quant_method", "%q is not supported (only MLX affine quantization: bits, group_size, mode \"affine\")", m)
		return q
	}
	g, ok := quantParams(o, QuantParams{}, true)
	if !ok {
		return q
	}
	q.Present, q.Global = true, g
	keys := make([]string, 0, len(o.m))
	for k := range o.m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic error order
	for _, k := range keys {
		switch k {
		case "bits", "group_size", "mode":
			continue
		}
		raw := o.m[k]
		switch t := strings.TrimSpace(string(raw)); {
		case t == "false":
			q.Disabled[k] = true
		case t == "true" || t == "null":
			continue // the global setting
		case strings.HasPrefix(t, "{"):
			var m map[string]json.RawMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				o.p.add(entryField(o, k), "not an object: %v", err)
				continue
			}
			sub := newObject(entryField(o, k)+".", m, o.p)
			p, ok := quantParams(sub, g, false)
			if !ok {
				continue
			}
			q.Overrides[k] = p
		default:
			o.p.add(entryField(o, k), "%s is neither an object nor a boolean", clip(raw))
			continue
		}
		c := CanonicalModule(k)
		if prev, dup := q.canon[c]; dup {
			if q.Disabled[prev] != q.Disabled[k] || q.Overrides[prev] != q.Overrides[k] {
				o.p.add(entryField(o, k), "disagrees with %q, the same module under another prefix", prev)
			}
			continue
		}
		q.canon[c] = k
	}
	return q
}

// entryField names a per-module entry: quantization["model.layers.0.mlp.gate"].
func entryField(o *Object, key string) string {
	return strings.TrimSuffix(o.path, ".") + "[" + strconv.Quote(key) + "]"
}

// quantParams reads bits, group_size and mode of the global setting
// (global true: bits and group_size required) or of a per-module entry.
// A per-module entry that leaves out bits or group_size is ambiguous when
// the global value differs from MLX's default: mlx passes the entry to
// to_quantized on its own (the default applies) in most versions, merged
// over the global setting in others. That is refused rather than guessed.
func quantParams(o *Object, global QuantParams, isGlobal bool) (QuantParams, bool) {
	ok := true
	if mode := o.OptString("mode"); mode != "" && mode != "affine" {
		o.Fail("mode", "quantization mode %q is not supported (only MLX affine)", mode)
		ok = false
	}
	var p QuantParams
	for _, f := range []struct {
		key     string
		dst     *int
		allowed []int
		def     int
		global  int
	}{
		{"bits", &p.Bits, QuantBitsAllowed, mlxDefaultBits, global.Bits},
		{"group_size", &p.GroupSize, QuantGroupAllowed, mlxDefaultGroup, global.GroupSize},
	} {
		if !o.Has(f.key) {
			switch {
			case isGlobal:
				o.Fail(f.key, "missing (mlx writes bits and group_size)")
				ok = false
			case f.global != f.def:
				o.Fail(f.key, "missing: ambiguous, since mlx versions read it as its default %d or as the global %d", f.def, f.global)
				ok = false
			default:
				*f.dst = f.def
			}
			continue
		}
		_, raw := o.Raw(f.key)
		v, err := integer(raw)
		if err != nil {
			o.Fail(f.key, "%v", err)
			ok = false
			continue
		}
		if !slices.Contains(f.allowed, int(v)) {
			o.Fail(f.key, "%d is not supported (want one of %s)", v, joinInts(f.allowed))
			ok = false
			continue
		}
		*f.dst = int(v)
	}
	return p, ok
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// QuantOf is a convenience for callers holding only raw JSON (a
// container's config.json, say): the quantization it declares, or the
// problems found in it. It does not require the rest of the config to be
// valid.
func QuantOf(data []byte, file string) (Quantization, error) {
	p := &problems{file: file}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		p.add("", "not a JSON object")
		return Quantization{}, p.err()
	}
	top := newObject("", m, p)
	text := top.OptObject("text_config")
	q := parseQuantization(top, text)
	if err := p.err(); err != nil {
		return Quantization{}, err
	}
	return q, nil
}

// String describes params for messages: "4 bits, group 64".
func (p QuantParams) String() string { return fmt.Sprintf("%d bits, group %d", p.Bits, p.GroupSize) }
