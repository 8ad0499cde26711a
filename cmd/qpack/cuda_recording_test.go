package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// recordingDir holds the logs of testdata/cuda/cli/device.sh, made on the
// accelerator machine.
var recordingDir = filepath.Join("..", "..", "testdata", "cuda", "cli")

func readRecording(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(recordingDir, name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasSuffix(strings.TrimSpace(s), "exit status 0") {
		t.Errorf("%s: the step did not exit 0", name)
	}
	return s
}

// resultLine is one RESULT line of the device run: its key=value fields
// (device="..." may hold spaces) and its verdict, the last word.
type resultLine struct {
	fields  map[string]string
	verdict string
}

var resultField = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// parseResults returns the RESULT lines of kind (logits, generate) by model.
func parseResults(t *testing.T, log, kind string) map[string][]resultLine {
	t.Helper()
	out := map[string][]resultLine{}
	for _, line := range strings.Split(log, "\n") {
		rest, ok := strings.CutPrefix(line, "RESULT "+kind+" ")
		if !ok {
			continue
		}
		r := resultLine{fields: map[string]string{}}
		for _, m := range resultField.FindAllStringSubmatch(rest, -1) {
			r.fields[m[1]] = strings.Trim(m[2], `"`)
		}
		words := strings.Fields(rest)
		r.verdict = words[len(words)-1]
		out[r.fields["model"]] = append(out[r.fields["model"]], r)
	}
	return out
}

func parseNumber(t *testing.T, model, key, v string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Errorf("%s: %s=%q is not a number", model, key, v)
	}
	return f
}

// The recorded device run covers every tiny model on an NVIDIA GPU, within
// the bounds (read back from the numbers, not only the verdict), with the
// sanitizers clean and --backend auto picking cuda. Adding a tiny model
// fails this until the device run is recorded again.
func TestCUDACLIRecording(t *testing.T) {
	log := readRecording(t, "cli.log")
	if !strings.Contains(log, "\n--- PASS: TestCUDADevice ") || strings.Contains(log, "--- FAIL") {
		t.Error("cli.log: TestCUDADevice did not pass")
	}
	logits, gens := parseResults(t, log, "logits"), parseResults(t, log, "generate")
	chats, serves := parseResults(t, log, "chat"), parseResults(t, log, "serve")
	models := tinyModels(t, filepath.Join("..", "..", "testdata", "tiny"))
	for _, m := range models {
		ls, gs := logits[m], gens[m]
		if len(ls) != 1 || len(gs) != 1 {
			t.Errorf("%s: %d logits and %d generate results recorded, want one each", m, len(ls), len(gs))
			continue
		}
		l := ls[0].fields
		if l["backend"] != "cuda" || !strings.HasPrefix(l["device"], "NVIDIA ") {
			t.Errorf("%s: ran on %s %q, want cuda on an NVIDIA device", m, l["backend"], l["device"])
		}
		diff, bound := parseNumber(t, m, "max_abs_diff", l["max_abs_diff"]), parseNumber(t, m, "bound", l["bound"])
		if bound != logitBound(m) || !(diff <= bound) {
			t.Errorf("%s: max |logit difference| %g against bound %g (want %g)", m, diff, bound, logitBound(m))
		}
		if parseNumber(t, m, "logits", l["logits"]) == 0 || parseNumber(t, m, "launches", l["launches"]) == 0 || l["fallbacks"] != "0" {
			t.Errorf("%s: %s logits, %s kernel launches, %s CPU fallbacks", m, l["logits"], l["launches"], l["fallbacks"])
		}
		if l["whole_layers"] != "true" || l["host_layer_ops"] != "0" {
			t.Errorf("%s: whole layers %q, %q layer ops on the host: the layer path did not run on kernels", m, l["whole_layers"], l["host_layer_ops"])
		}
		if l["greedy"] != "identical" || ls[0].verdict != "PASS" {
			t.Errorf("%s: logits greedy %s, %s", m, l["greedy"], ls[0].verdict)
		}
		for kind, rs := range map[string][]resultLine{"chat": chats[m], "serve": serves[m]} {
			if len(rs) != 1 {
				t.Errorf("%s: %d %s results recorded, want one", m, len(rs), kind)
				continue
			}
			f := rs[0].fields
			if f["backend"] != "cuda" || f["output"] != "identical" || rs[0].verdict != "PASS" {
				t.Errorf("%s: %s on %s, output %s, %s", m, kind, f["backend"], f["output"], rs[0].verdict)
			}
			if kind == "chat" && (f["fallbacks"] != "0" || parseNumber(t, m, "launches", f["launches"]) == 0) {
				t.Errorf("%s: chat with %s kernel launches, %s CPU fallbacks", m, f["launches"], f["fallbacks"])
			}
			if kind == "serve" && !strings.HasPrefix(f["start_line_backend"], "cuda (NVIDIA ") {
				t.Errorf("%s: serve's start line says backend %q", m, f["start_line_backend"])
			}
		}
		g := gs[0].fields
		small, resident := parseNumber(t, m, "small_hit_rate", g["small_hit_rate"]), parseNumber(t, m, "resident_hit_rate", g["resident_hit_rate"])
		if g["backend"] != "cuda" || g["output"] != "identical" || !(small < resident) || gs[0].verdict != "PASS" {
			t.Errorf("%s: generate on %s, output %s, hit rate %g small against %g resident, %s", m, g["backend"], g["output"], small, resident, gs[0].verdict)
		}
	}
	for m := range logits {
		if !slices.Contains(models, m) {
			t.Errorf("cli.log: %s is not a tiny model of this tree", m)
		}
	}

	mem := readRecording(t, "memcheck.log")
	if !strings.Contains(mem, "========= ERROR SUMMARY: 0 errors") {
		t.Error("memcheck.log: not clean")
	}
	race := readRecording(t, "racecheck.log")
	if !strings.Contains(race, "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") {
		t.Error("racecheck.log: not clean")
	}
	for name, s := range map[string]string{"memcheck.log": mem, "racecheck.log": race} {
		if !strings.Contains(s, `"name": "cuda"`) || !strings.Contains(s, `"cpu_fallbacks": 0`) || !strings.Contains(s, `"greedy"`) {
			t.Errorf("%s: not a logits run on cuda without CPU fallbacks", name)
		}
	}
	auto := readRecording(t, "auto.log")
	if !strings.Contains(auto, `msg="backend auto: cuda" device="NVIDIA `) || !strings.Contains(auto, "\nbackend: cuda (NVIDIA ") {
		t.Error("auto.log: --backend auto did not pick cuda")
	}
}
