package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/qpack-go/qpack/runtime/sample"
)

// Where a sampling parameter came from, as the summary and --json say.
const (
	fromFlag         = "flag"
	fromGenConfig    = "generation_config.json"
	fromTransformers = "transformers default"
	fromGreedy       = "greedy"
	fromDefault      = "default"
	fromRandom       = "random"
)

// samplingReport is the sampling a run used and where each value came
// from (--json "sampling").
type samplingReport struct {
	Mode              string            `json:"mode"` // "greedy" or "sample"
	Temperature       float64           `json:"temperature"`
	TopK              int               `json:"top_k"`
	TopP              float64           `json:"top_p"`
	MinP              float64           `json:"min_p"`
	RepetitionPenalty float64           `json:"repetition_penalty"`
	PresencePenalty   float64           `json:"presence_penalty"`
	Seed              uint64            `json:"seed"`
	Sources           map[string]string `json:"sources"`
	// Why is what chose the mode, e.g. "generation_config.json: do_sample true".
	Why string `json:"why"`
}

// resolveSampling gives the sampling parameters of a run: the model's
// generation_config.json read with transformers' semantics (do_sample
// false or absent: greedy; do_sample true: its temperature, top_k, top_p
// and min_p, transformers' defaults for the ones it leaves out; its
// repetition_penalty in both modes), then every flag given on the command
// line over it. A --temperature above 0 samples as do_sample true would (the
// file's filters and transformers' defaults apply unless given as flags);
// --temperature 0 is greedy. Without --seed, sampling draws a seed, which
// the report gives so that the run can be repeated.
func resolveSampling(l *lateFlags, g *sample.GenerationConfig) (sample.Params, *samplingReport, error) {
	set := func(name string) bool { return l.isSet(name) }
	sampling := g.Sampling()
	if set("temperature") {
		sampling = float64Flag(l, "temperature") > 0
	}
	src := map[string]string{}
	var p sample.Params
	if sampling {
		// The file's values as do_sample true reads them.
		var on sample.GenerationConfig
		if g != nil {
			on = *g
		}
		t := true
		on.DoSample = &t
		p = on.Params(sample.Params{})
	} else {
		p = g.Params(sample.Params{})
	}
	fileHas := map[string]bool{}
	if g != nil {
		fileHas = map[string]bool{"temperature": g.Temperature != nil, "top_k": g.TopK != nil, "top_p": g.TopP != nil,
			"min_p": g.MinP != nil, "repetition_penalty": g.RepetitionPenalty != nil}
	}
	for _, k := range []string{"temperature", "top_k", "top_p", "min_p"} {
		switch {
		case !sampling:
			src[k] = fromGreedy
		case fileHas[k]:
			src[k] = fromGenConfig
		default:
			src[k] = fromTransformers
		}
	}
	if !sampling && g.Sampling() {
		// --temperature 0 over a file that samples.
		src["temperature"] = fromFlag
	}
	if fileHas["repetition_penalty"] {
		src["repetition_penalty"] = fromGenConfig
	} else {
		src["repetition_penalty"] = fromDefault
	}
	src["presence_penalty"] = fromDefault

	flags := []struct {
		flag, key string
		apply     func()
	}{
		{"temperature", "temperature", func() { p.Temperature = float64Flag(l, "temperature") }},
		{"top-k", "top_k", func() { p.TopK = l.Int("top-k") }},
		{"top-p", "top_p", func() { p.TopP = float64Flag(l, "top-p") }},
		{"min-p", "min_p", func() { p.MinP = float64Flag(l, "min-p") }},
		{"repetition-penalty", "repetition_penalty", func() { p.RepetitionPenalty = float64Flag(l, "repetition-penalty") }},
		{"presence-penalty", "presence_penalty", func() { p.PresencePenalty = float64Flag(l, "presence-penalty") }},
	}
	for _, f := range flags {
		if set(f.flag) {
			f.apply()
			src[f.key] = fromFlag
		}
	}
	if err := p.Validate(); err != nil {
		return p, nil, withCode(2, err)
	}
	if !sampling {
		// Greedy: the filters do nothing; report them as off, and say so
		// for those given as flags (transformers warns likewise).
		p.Temperature, p.TopK, p.TopP, p.MinP = 0, 0, 0, 0
		for _, f := range flags[1:4] {
			if set(f.flag) {
				slog.Warn("--"+f.flag+" has no effect: decoding is greedy; give --temperature above 0 to sample", "flag", f.flag)
				src[f.key] = fromGreedy
			}
		}
	}
	switch {
	case set("seed"):
		p.Seed = uint64Flag(l, "seed")
		src["seed"] = fromFlag
	case sampling:
		p.Seed = randomSeed()
		src["seed"] = fromRandom
	default:
		src["seed"] = fromGreedy
	}
	why := ""
	switch {
	case set("temperature"):
		why = fmt.Sprintf("--temperature %g", p.Temperature)
		if !sampling {
			why = "--temperature 0"
		}
	case g == nil:
		why = "no generation_config.json"
	case g.DoSample == nil:
		why = "generation_config.json has no do_sample"
	default:
		why = fmt.Sprintf("generation_config.json: do_sample %t", *g.DoSample)
	}
	rep := &samplingReport{Why: why, Mode: "greedy", Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP,
		RepetitionPenalty: p.RepetitionPenalty, PresencePenalty: p.PresencePenalty, Seed: p.Seed, Sources: src}
	if rep.RepetitionPenalty == 0 {
		rep.RepetitionPenalty = 1 // off, as transformers writes it
	}
	if sampling {
		rep.Mode = "sample"
	}
	return p, rep, nil
}

// print writes one line: the mode and each parameter in effect with its
// source.
func (s *samplingReport) print(w io.Writer) {
	if s == nil {
		return
	}
	var parts []string
	add := func(key, text string) { parts = append(parts, fmt.Sprintf("%s (%s)", text, s.Sources[key])) }
	if s.Mode == "greedy" {
		parts = append(parts, "greedy ("+s.Why+")")
	} else {
		parts = append(parts, "sampled ("+s.Why+")")
		add("temperature", fmt.Sprintf("temperature %g", s.Temperature))
		if s.TopK > 0 {
			add("top_k", fmt.Sprintf("top_k %d", s.TopK))
		}
		if s.TopP > 0 && s.TopP < 1 {
			add("top_p", fmt.Sprintf("top_p %g", s.TopP))
		}
		if s.MinP > 0 {
			add("min_p", fmt.Sprintf("min_p %g", s.MinP))
		}
	}
	if s.RepetitionPenalty > 0 && s.RepetitionPenalty != 1 {
		add("repetition_penalty", fmt.Sprintf("repetition_penalty %g", s.RepetitionPenalty))
	}
	if s.PresencePenalty != 0 {
		add("presence_penalty", fmt.Sprintf("presence_penalty %g", s.PresencePenalty))
	}
	line := "sampling: " + strings.Join(parts, ", ")
	if s.Mode == "sample" {
		line += fmt.Sprintf("; seed %d (--seed %d repeats this run)", s.Seed, s.Seed)
	}
	fmt.Fprintln(w, line)
}
