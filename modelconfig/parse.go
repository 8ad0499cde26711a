package modelconfig

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/internal/regfile"
)

// FileName is the name of the config file in a checkpoint or container.
const FileName = "config.json"

// Load reads and parses dir/config.json with the default registry. Errors
// name the file's path.
func Load(dir string) (*Config, error) {
	path := filepath.Join(dir, FileName)
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// ReadFile reads a config file of at most MaxBytes.
func ReadFile(path string) ([]byte, error) {
	f, _, err := regfile.Open(path) // never blocks on a FIFO
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxBytes {
		return nil, &Error{File: path, Msg: fmt.Sprintf("more than %d bytes, the limit for a config (MaxBytes)", MaxBytes)}
	}
	return data, nil
}

// Parse parses and validates a config.json document; file names it in
// errors. The error, when there is one, is an ErrorList holding every
// problem found (each an *Error naming the field); errors.Is(err,
// ErrConfig) is true for it, and errors.Is(err, ErrUnsupported) when the
// architecture is not one the registry knows.
func Parse(data []byte, file string) (*Config, error) { return defaultRegistry.Parse(data, file) }

// Parse is the package's Parse with the architectures of r.
func (r *Registry) Parse(data []byte, file string) (*Config, error) {
	if file == "" {
		file = FileName
	}
	p := &problems{file: file}
	if len(data) > MaxBytes {
		p.add("", "%d bytes, more than the %d-byte limit for a config (MaxBytes)", len(data), MaxBytes)
		return nil, p.err()
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		msg := "not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		p.add("", "%s", msg)
		return nil, p.err()
	}
	top := newObject("", m, p)
	declared := top.OptString("model_type")
	if declared == "" {
		if len(p.list) == 0 {
			p.list = append(p.list, &Error{File: file, Field: "model_type", Msg: "missing", Supported: r.Supported()})
		}
		return nil, p.err()
	}
	d := &Document{File: file, Top: top, Text: top, Declared: declared}
	if top.Has("text_config") {
		t := top.OptObject("text_config")
		if t == nil {
			return nil, p.err()
		}
		d.Text, d.Nested = t, true
		d.TextDeclared = t.OptString("model_type")
	}
	arch := r.lookup(declared)
	if arch == nil {
		p.list = append(p.list, &Error{File: file, Field: "model_type", Msg: fmt.Sprintf("%q is not supported", declared), Supported: r.Supported()})
		return nil, p.err()
	}
	if d.Nested && d.TextDeclared != "" && !slices.Contains(arch.TextModelTypes, d.TextDeclared) {
		p.list = append(p.list, &Error{File: file, Field: "text_config.model_type",
			Msg: fmt.Sprintf("%q does not go with model_type %q (want %s)", d.TextDeclared, declared, strings.Join(arch.TextModelTypes, " or "))})
		return nil, p.err()
	}
	c := arch.Parse(d)
	if err := p.err(); err != nil {
		return nil, err
	}
	if c == nil {
		p.add("", "architecture %s gave no description", arch.Name)
		return nil, p.err()
	}
	c.ModelType, c.Declared, c.TextDeclared, c.Nested = arch.Name, declared, d.TextDeclared, d.Nested
	checkCommon(c, d, r)
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// checkCommon holds the rules every architecture's description must keep,
// whatever parsed it.
func checkCommon(c *Config, d *Document, r *Registry) {
	f := d.Text.Fail
	if c.Layers < 1 || len(c.FullAttention) != c.Layers || len(c.Sparse) != c.Layers {
		f("num_hidden_layers", "%d layers, but %d attention kinds and %d MLP kinds resolved", c.Layers, len(c.FullAttention), len(c.Sparse))
	}
	if c.Hidden < 1 || c.Vocab < 1 || c.Heads < 1 || c.KVHeads < 1 || c.HeadDim < 1 {
		f("", "a dimension resolved to zero")
	}
	if c.KVHeads > 0 && c.Heads%c.KVHeads != 0 {
		f("num_attention_heads", "%d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.RotaryDim%2 != 0 || c.RotaryDim > c.HeadDim {
		f("partial_rotary_factor", "rotary dims %d: not even or above head_dim %d", c.RotaryDim, c.HeadDim)
	}
	sparse := slices.Contains(c.Sparse, true)
	if sparse && (c.Experts < 1 || c.TopK < 1 || c.MoEIntermediate < 1) {
		f("num_experts", "MoE layers with %d experts, top-%d, moe_intermediate_size %d", c.Experts, c.TopK, c.MoEIntermediate)
	}
	if c.TopK > c.Experts {
		f("num_experts_per_tok", "%d is more than num_experts %d", c.TopK, c.Experts)
	}
	if !sparse {
		d.Top.p.list = append(d.Top.p.list, &Error{File: d.File, Field: "num_experts",
			Msg: "no layer has routed experts: a dense model, which qpack does not run", Supported: r.Supported()})
	}
	if slices.Contains(c.Sparse, false) && c.Intermediate < 1 {
		f("intermediate_size", "missing, but some layers have a dense MLP")
	}
	if c.Prefix == "" || c.HeadPrefix == "" {
		f("", "no tensor name prefix resolved")
	}
}
