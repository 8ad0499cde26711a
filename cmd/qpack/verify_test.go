package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/verify"
)

func vfExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return -1
}

func TestVerifyInstallCLI(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64")
	dir := filepath.Join(t.TempDir(), "tiny.qpack")
	if _, err := repack.Run(context.Background(), repack.Options{FromDir: src, Output: dir, Reserve: -1, ToolVersion: "test"}); err != nil {
		t.Fatal(err)
	}

	out, err := runCLI(t, "verify-install", dir, "--json")
	if vfExitCode(err) != 0 {
		t.Fatalf("intact: %v\n%s", err, out)
	}
	var rep struct {
		Status  string `json:"status"`
		Receipt string `json:"receipt"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Status != "ok" {
		t.Fatalf("%v\n%s", err, out)
	}
	var rc verify.Receipt
	if err := json.Unmarshal(vfReadFile(t, filepath.Join(dir, verify.ReceiptName)), &rc); err != nil || rep.Receipt != filepath.Join(dir, verify.ReceiptName) || len(rc.Files) == 0 {
		t.Fatalf("receipt: %v %+v", err, rc)
	}

	out, err = runCLI(t, "verify-install", "--deep", "--source", src, dir)
	if vfExitCode(err) != 0 || !strings.Contains(out, "shard model-00002-of-00002.safetensors: ok") {
		t.Fatalf("deep: %v\n%s", err, out)
	}

	// One flipped byte in expert 2 of layer 6: exit 1, named.
	p := filepath.Join(dir, filepath.FromSlash(qpack.LayerFile(6)))
	data := vfReadFile(t, p)
	data[2*16384+100] ^= 1
	os.WriteFile(p, data, 0o644)
	os.Remove(filepath.Join(dir, verify.ReceiptName))
	out, err = runCLI(t, "verify-install", dir)
	if vfExitCode(err) != 1 || !strings.Contains(out, "packed_experts/layer_06.bin layer 6 expert 2") {
		t.Fatalf("damaged: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, verify.ReceiptName)); err == nil {
		t.Fatal("receipt written for a damaged container")
	}
	out, err = runCLI(t, "verify-install", dir, "--deep", "--source", src)
	if vfExitCode(err) != 1 || !strings.Contains(out, "layer 6 expert 2 section gate_proj.weight") {
		t.Fatalf("damaged, deep: %v\n%s", err, out)
	}

	// Not a container: exit 2.
	out, err = runCLI(t, "verify-install", t.TempDir())
	if vfExitCode(err) != 2 {
		t.Fatalf("not a container: %v\n%s", err, out)
	}
	// --deep without a recorded Hub source and without --source: exit 2.
	if _, err := runCLI(t, "verify-install", "--deep", dir); vfExitCode(err) != 2 {
		t.Fatalf("no source: %v", err)
	}
}

func vfReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The report on stdout already states a fatal error; main must not print
// it again on stderr, but must still exit with its code.
func TestVerifyInstallErrorPrintedOnce(t *testing.T) {
	notContainer := t.TempDir()
	src := filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64")
	damaged := filepath.Join(t.TempDir(), "tiny.qpack")
	if _, err := repack.Run(context.Background(), repack.Options{FromDir: src, Output: damaged, Reserve: -1, ToolVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(damaged, filepath.FromSlash(qpack.LayerFile(1)))
	data := vfReadFile(t, p)
	data[100] ^= 1
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, once, onceJSON string
		code                      int
	}{
		{"unusable", notContainer, "not a qpack container", "not a qpack container", 2},
		{"damaged", damaged, "layer 1 expert 0", `"expert-digest"`, 1},
	} {
		for _, asJSON := range []bool{false, true} {
			args := []string{"verify-install", tc.dir}
			if asJSON {
				args = append(args, "--json")
			}
			out, err := runCLI(t, args...)
			var stderr strings.Builder
			if code := exitStatus(&stderr, err); code != tc.code {
				t.Fatalf("%s json=%v: exit %d, want %d (%v)", tc.name, asJSON, code, tc.code, err)
			}
			if stderr.Len() != 0 {
				t.Errorf("%s json=%v: printed again on stderr: %q", tc.name, asJSON, stderr.String())
			}
			once := tc.once
			if asJSON {
				once = tc.onceJSON
			}
			if n := strings.Count(out, once); n != 1 {
				t.Errorf("%s json=%v: %q appears %d times in the report:\n%s", tc.name, asJSON, once, n, out)
			}
		}
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err   error
		code  int
		print string
	}{
		{nil, 0, ""},
		{errors.New("plain"), 1, "qpack: plain\n"},
		{withCode(2, errors.New("usage")), 2, "qpack: usage\n"},
		{silentCode(1, errors.New("shown")), 1, ""},
		{fmt.Errorf("wrapped: %w", silentCode(2, errors.New("shown"))), 2, ""},
	} {
		var w strings.Builder
		if code := exitStatus(&w, tc.err); code != tc.code || w.String() != tc.print {
			t.Errorf("%v: code %d, printed %q; want %d, %q", tc.err, code, w.String(), tc.code, tc.print)
		}
	}
}

// --receipt never replaces what qpack did not write: an existing file that
// is not a receipt, or a directory, is refused (exit 2, naming it) before
// anything is hashed, and left as it was; a receipt an earlier run wrote
// there is replaced.
func TestVerifyReceiptTarget(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64")
	dir := filepath.Join(t.TempDir(), "tiny.qpack")
	if _, err := repack.Run(context.Background(), repack.Options{FromDir: src, Output: dir, Reserve: -1, ToolVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	foreign := filepath.Join(tmp, "notes.json")
	const keep = `{"mine": true}` + "\n"
	if err := os.WriteFile(foreign, []byte(keep), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{foreign, tmp} {
		out, err := runCLI(t, "verify-install", "--receipt", target, dir)
		if vfExitCode(err) != 2 || !strings.Contains(err.Error(), target) || strings.Contains(out, "ok (") {
			t.Fatalf("--receipt %s: exit %d, %v\n%s", target, vfExitCode(err), err, out)
		}
	}
	if got := string(vfReadFile(t, foreign)); got != keep {
		t.Fatalf("foreign file changed: %q", got)
	}
	fresh := filepath.Join(tmp, "r.json")
	for i := 0; i < 2; i++ { // the second run replaces its own receipt
		if out, err := runCLI(t, "verify-install", "--receipt", fresh, dir); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out)
		}
	}
	var rc verify.Receipt
	if err := json.Unmarshal(vfReadFile(t, fresh), &rc); err != nil || len(rc.Files) == 0 {
		t.Fatalf("receipt: %v %+v", err, rc)
	}
}
