package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/safetensors"
)

func runLogitsCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{"qpack", "logits"}, args...))
	return out.String(), err
}

const logitsModel = "../../testdata/tiny/qwen3_5_moe-q8g64"

func TestLogitsCommand(t *testing.T) {
	if _, err := os.Stat(logitsModel); err != nil {
		t.Fatalf("the committed tiny model is missing: %v", err)
	}
	tokens := []int{3, 77, 200, 5}
	m, err := runtime.Load(logitsModel, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want, err := m.Forward(m.NewState(), tokens, &runtime.ForwardOptions{AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.Vocab

	out := filepath.Join(t.TempDir(), "out.safetensors")
	// Flags after MODEL, as documented.
	text, err := runLogitsCLI(t, logitsModel, "--tokens", "3, 77,200,5", "--output", out, "--dump-layers", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	var res logitsResult
	if err := json.Unmarshal([]byte(text), &res); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, text)
	}
	if len(res.Greedy) != 4 || res.Vocab != V || res.Output != out {
		t.Fatalf("JSON: %+v", res)
	}
	h, err := safetensors.ReadFileHeader(out)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lt, ok := h.Tensor("logits")
	if !ok || lt.DType != safetensors.F32 || len(lt.Shape) != 2 || lt.Shape[0] != 4 || lt.Shape[1] != int64(V) {
		t.Fatalf("logits tensor %+v", lt)
	}
	for i, w := range want {
		got := math.Float32frombits(binary.LittleEndian.Uint32(data[lt.Offset+4*int64(i):]))
		if got != w {
			t.Fatalf("logit %d: file %g, runtime %g", i, got, w)
		}
	}
	for p := range 4 {
		row := want[p*V : (p+1)*V]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		gt, _ := h.Tensor("greedy")
		if g := int(binary.LittleEndian.Uint64(data[gt.Offset+8*int64(p):])); g != best || res.Greedy[p] != best {
			t.Fatalf("greedy at %d: file %d, json %d, want %d", p, g, res.Greedy[p], best)
		}
	}
	for l := range m.Config.Layers {
		ht, ok := h.Tensor("hidden." + string(rune('0'+l)))
		if !ok || ht.Shape[0] != 4 || ht.Shape[1] != int64(m.Config.Hidden) {
			t.Fatalf("hidden.%d: %+v", l, ht)
		}
	}

	// Table output, flags before MODEL.
	text, err = runLogitsCLI(t, "--tokens", "3,77,200,5", logitsModel)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if lines := strings.Split(strings.TrimSpace(text), "\n"); len(lines) != 5 || !strings.Contains(lines[0], "greedy next") {
		t.Fatalf("table:\n%s", text)
	}
}

func TestLogitsCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{logitsModel}, "--tokens is required", 2},
		{[]string{logitsModel, "--tokens", "1,x"}, `"x" at position 1 is not a token id`, 2},
		{[]string{logitsModel, "--tokens", "1,,2"}, "empty entry", 2},
		{[]string{logitsModel, "--tokens", "1", "--dump-layers"}, "--dump-layers needs --output", 2},
		{[]string{logitsModel, "--tokens", "1", "extra"}, "exactly one MODEL", 2},
		{[]string{logitsModel, "--tokens", "1,384"}, "--tokens: token id 384 at position 1 is outside the vocabulary of " + logitsModel + " (vocab_size 384: ids 0 to 383)", 2},
		{[]string{logitsModel, "--tokens", "1,99999"}, "token id 99999 at position 1", 2},
		{[]string{"/nonexistent/model", "--tokens", "1"}, "model directory /nonexistent/model does not exist", 2},
		{[]string{"..", "--tokens", "1"}, ".. is neither a .qpack container (no manifest.json) nor an MLX checkpoint (no config.json)", 2},
	} {
		_, err := runLogitsCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
			continue
		}
		var ee *exitError
		if tc.code != 0 && (!errors.As(err, &ee) || ee.code != tc.code) {
			t.Errorf("%v: exit code not %d: %v", tc.args, tc.code, err)
		}
	}
}
