package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// TestQuickstart runs the README's first command in-process and checks the
// container it leaves against the source checkpoint it was made from.
func TestQuickstart(t *testing.T) {
	work := t.TempDir()
	out, err := runCLI(t, "quickstart", "--json", "--workdir", work)
	if err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	var sum quickstartSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	c, err := qpack.Open(sum.Container)
	if err != nil {
		t.Fatalf("the quickstart container does not open: %v", err)
	}
	defer c.Close()
	src, err := safetensors.OpenCheckpoint(sum.Source)
	if err != nil {
		t.Fatal(err)
	}
	// Every dense tensor of the container is the source tensor, byte for byte.
	dense, err := os.ReadFile(filepath.Join(sum.Container, qpack.DenseName))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Dense.Tensors {
		sh, st, ok := src.Lookup(d.Name)
		if !ok {
			t.Fatalf("container tensor %s is not in the source", d.Name)
		}
		b, err := os.ReadFile(sh.Path)
		if err != nil {
			t.Fatal(err)
		}
		if string(b[st.Offset:st.Offset+st.Size]) != string(dense[d.Offset:d.Offset+d.Size]) {
			t.Errorf("dense tensor %s differs from the source", d.Name)
		}
	}
	if sum.Inspect == nil || sum.Inspect.Kind != "qpack" || sum.Inspect.Experts == nil || sum.Inspect.Experts.Count != 8 {
		t.Errorf("inspect step: %+v", sum.Inspect)
	}
	if len(sum.Steps) < 3 || sum.Steps[2] != "verify" {
		t.Errorf("steps %v", sum.Steps)
	}
	if sum.Verify == nil || sum.Verify.Status != "ok" || sum.Verify.Deep == nil {
		t.Errorf("verify step: %+v", sum.Verify)
	}
	if _, err := os.Stat(filepath.Join(sum.Container, "verified-install.json")); err != nil {
		t.Errorf("no receipt: %v", err)
	}
}
