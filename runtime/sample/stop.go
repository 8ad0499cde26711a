package sample

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/internal/regfile"
)

// Stopper decides when generation ends: on an EOS id, or when the decoded
// text contains a stop string. Text is fed to it in pieces as it is decoded;
// it holds back any tail that could be the start of a stop string, so the
// text it releases never contains (part of) a stop string. Not safe for
// concurrent use.
type Stopper struct {
	eos     map[int]bool
	stops   []string
	pending string
	stopped bool
}

// NewStopper returns a stopper for the given EOS ids and stop strings
// (empty strings are ignored).
func NewStopper(eosIDs []int, stopStrings []string) *Stopper {
	s := &Stopper{eos: map[int]bool{}}
	for _, id := range eosIDs {
		s.eos[id] = true
	}
	for _, t := range stopStrings {
		if t != "" {
			s.stops = append(s.stops, t)
		}
	}
	return s
}

// IsEOS reports whether id ends generation.
func (s *Stopper) IsEOS(id int) bool { return s.eos[id] }

// EOSIDs returns the EOS ids in ascending order.
func (s *Stopper) EOSIDs() []int {
	out := make([]int, 0, len(s.eos))
	for id := range s.eos {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Push adds decoded text. It returns the text that can be shown now and
// whether a stop string was found; when it was, emit ends just before the
// stop string, the rest is dropped, and later Pushes return nothing. When
// several stop strings occur, the one completed first in the text wins, so
// the result does not depend on how the text was cut into pieces.
func (s *Stopper) Push(text string) (emit string, stopped bool) {
	if s.stopped {
		return "", true
	}
	buf := s.pending + text
	// The stop string that completes first as the text grows (smallest end;
	// on a tie the one that starts earlier) ends generation.
	start, end := -1, -1
	for _, t := range s.stops {
		if i := strings.Index(buf, t); i >= 0 {
			if e := i + len(t); end < 0 || e < end || (e == end && i < start) {
				start, end = i, e
			}
		}
	}
	if start >= 0 {
		s.stopped = true
		s.pending = ""
		return buf[:start], true
	}
	hold := 0
	for _, t := range s.stops {
		for k := min(len(t)-1, len(buf)); k > hold; k-- {
			if strings.HasSuffix(buf, t[:k]) {
				hold = k
				break
			}
		}
	}
	s.pending = buf[len(buf)-hold:]
	return buf[:len(buf)-hold], false
}

// Flush returns the held-back text at the end of generation (when it ended
// for another reason than a stop string).
func (s *Stopper) Flush() string {
	out := s.pending
	s.pending = ""
	return out
}

// Stopped reports whether a stop string has been seen.
func (s *Stopper) Stopped() bool { return s.stopped }

const (
	maxConfigSize = 1 << 20
	maxEOSIDs     = 64
	maxTokenID    = 1 << 24
)

// EOSFromJSON reads eos_token_id (an integer or a list of integers) from a
// generation_config.json or config.json, at the top level and in
// "text_config" (where Qwen3.5/3.6 configs keep it), in that order without
// duplicates; name is used in errors. A file without the field gives no ids
// and no error.
func EOSFromJSON(name string, data []byte) ([]int, error) {
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("sample: %s: more than %d bytes", name, maxConfigSize)
	}
	type eosField struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	var cfg struct {
		eosField
		Text *eosField `json:"text_config"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("sample: %s: %w", name, err)
	}
	var text json.RawMessage
	if cfg.Text != nil {
		text = cfg.Text.EOS
	}
	var out []int
	for _, f := range []struct {
		field string
		raw   json.RawMessage
	}{{"eos_token_id", cfg.EOS}, {"text_config.eos_token_id", text}} {
		ids, err := parseEOS(name, f.field, f.raw)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out, nil
}

// parseEOS reads one eos_token_id value: an integer, a list of integers, or
// null.
func parseEOS(name, field string, raw json.RawMessage) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var ids []int64
	var one int64
	if err := json.Unmarshal(raw, &one); err == nil {
		ids = []int64{one}
	} else if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("sample: %s: %s is neither an integer nor a list of integers", name, field)
	}
	if len(ids) > maxEOSIDs {
		return nil, fmt.Errorf("sample: %s: %d %s values, more than %d", name, len(ids), field, maxEOSIDs)
	}
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		if id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("sample: %s: %s %d out of range", name, field, id)
		}
		out = append(out, int(id))
	}
	return out, nil
}

// LoadEOS collects the EOS ids of a model directory from
// generation_config.json and config.json (either may be missing; in
// config.json both the top level and "text_config"), without
// duplicates, in ascending order.
func LoadEOS(dir string) ([]int, error) {
	set := map[int]bool{}
	for _, f := range []string{"generation_config.json", "config.json"} {
		p := filepath.Join(dir, f)
		data, err := readBounded(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ids, err := EOSFromJSON(p, data)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			set[id] = true
		}
	}
	out := make([]int, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// readBounded reads a small config file, refusing anything but a regular
// file (a FIFO would block the open) and more than maxConfigSize bytes.
func readBounded(path string) ([]byte, error) {
	data, err := regfile.ReadFile(path, maxConfigSize)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("sample: %w", err)
	}
	return data, err
}

// GenerationConfig is the sampling part of a generation_config.json. A
// field is nil when the file does not have it or has it as null; then
// transformers' default applies (TransformersDefaults).
type GenerationConfig struct {
	Name              string // the file, for errors and reports
	DoSample          *bool
	Temperature       *float64
	TopK              *int
	TopP              *float64
	MinP              *float64
	RepetitionPenalty *float64
}

// TransformersDefaults are the values transformers' GenerationConfig uses
// for the sampling fields a generation_config.json leaves out: do_sample
// false (greedy), temperature 1, top_k 50, top_p 1, no min_p, repetition
// penalty 1. As Params (with Temperature 1: these apply when sampling).
var TransformersDefaults = Params{Temperature: 1, TopK: 50, TopP: 1, RepetitionPenalty: 1}

// maxTopK bounds top_k as read from a file (a vocabulary is far smaller).
const maxTopK = 1 << 24

// ParseGenerationConfig reads the sampling fields of a
// generation_config.json; name is used in errors. Values out of range are
// refused with an error naming the file and the field.
func ParseGenerationConfig(name string, data []byte) (*GenerationConfig, error) {
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("sample: %s: more than %d bytes", name, maxConfigSize)
	}
	var raw struct {
		DoSample          *bool    `json:"do_sample"`
		Temperature       *float64 `json:"temperature"`
		TopK              *float64 `json:"top_k"`
		TopP              *float64 `json:"top_p"`
		MinP              *float64 `json:"min_p"`
		RepetitionPenalty *float64 `json:"repetition_penalty"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("sample: %s: %w", name, err)
	}
	g := &GenerationConfig{Name: name, DoSample: raw.DoSample, Temperature: raw.Temperature, TopP: raw.TopP,
		MinP: raw.MinP, RepetitionPenalty: raw.RepetitionPenalty}
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("sample: %s: %s %v: want %s", name, field, v, want)
	}
	if v := raw.TopK; v != nil {
		if *v != math.Trunc(*v) || *v < 0 || *v > maxTopK {
			return nil, bad("top_k", *v, fmt.Sprintf("an integer from 0 to %d", maxTopK))
		}
		k := int(*v)
		g.TopK = &k
	}
	if v := g.Temperature; v != nil && (math.IsNaN(*v) || *v < 0 || math.IsInf(*v, 0)) {
		return nil, bad("temperature", *v, "a finite number >= 0")
	}
	if v := g.TopP; v != nil && !(*v >= 0 && *v <= 1) {
		return nil, bad("top_p", *v, "a number from 0 to 1")
	}
	if v := g.MinP; v != nil && !(*v >= 0 && *v <= 1) {
		return nil, bad("min_p", *v, "a number from 0 to 1")
	}
	if v := g.RepetitionPenalty; v != nil && (math.IsNaN(*v) || *v < 0 || math.IsInf(*v, 0)) {
		return nil, bad("repetition_penalty", *v, "a finite number > 0")
	}
	return g, nil
}

// LoadGenerationConfig reads dir/generation_config.json; a directory
// without one gives nil and no error.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	p := filepath.Join(dir, "generation_config.json")
	data, err := readBounded(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseGenerationConfig(p, data)
}

// Sampling reports whether the file asks for sampling (do_sample true);
// otherwise transformers decodes greedily.
func (g *GenerationConfig) Sampling() bool { return g != nil && g.DoSample != nil && *g.DoSample }

// Params gives the parameters transformers would use for this file, over
// base (which keeps its Seed and PresencePenalty): with do_sample true, the
// file's temperature, top_k, top_p and min_p, each absent one at
// transformers' default (TransformersDefaults); otherwise greedy
// (temperature 0, no filters). The repetition penalty applies in both
// modes, as in transformers. A nil g is a model without the file: greedy.
func (g *GenerationConfig) Params(base Params) Params {
	p := base
	p.Temperature, p.TopK, p.TopP, p.MinP = 0, 0, 0, 0
	if g == nil {
		return p
	}
	if g.RepetitionPenalty != nil {
		p.RepetitionPenalty = *g.RepetitionPenalty
	}
	if !g.Sampling() {
		return p
	}
	d := TransformersDefaults
	p.Temperature, p.TopK, p.TopP = d.Temperature, d.TopK, d.TopP
	if g.Temperature != nil {
		p.Temperature = *g.Temperature
	}
	if g.TopK != nil {
		p.TopK = *g.TopK
	}
	if g.TopP != nil {
		p.TopP = *g.TopP
	}
	if g.MinP != nil {
		p.MinP = *g.MinP
	}
	return p
}

// ParamsFromGenerationConfig is ParseGenerationConfig followed by Params:
// the sampling transformers would do with this generation_config.json.
func ParamsFromGenerationConfig(name string, data []byte, base Params) (Params, error) {
	g, err := ParseGenerationConfig(name, data)
	if err != nil {
		return base, err
	}
	p := g.Params(base)
	if err := p.Validate(); err != nil {
		return base, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}
