package tinymodel

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

// committedDir is where the committed copies live, seen from this package.
const committedDir = "../../testdata/tiny"

// generated caches one generation of every variant per test binary run.
var (
	genOnce sync.Once
	genRoot string
	genErr  error
)

// generatedVariants generates every variant once into a shared temporary
// directory and returns it.
func generatedVariants(t *testing.T) string {
	t.Helper()
	genOnce.Do(func() {
		genRoot, genErr = os.MkdirTemp("", "tinymodel-test-")
		if genErr != nil {
			return
		}
		for _, v := range Variants() {
			if genErr = Generate(filepath.Join(genRoot, v.Name), v.Spec); genErr != nil {
				return
			}
		}
	})
	if genErr != nil {
		t.Fatal(genErr)
	}
	return genRoot
}

func TestMain(m *testing.M) {
	code := m.Run()
	if genRoot != "" {
		os.RemoveAll(genRoot)
	}
	os.Exit(code)
}

// ckpt is an opened checkpoint with a way to read tensor bytes.
type ckpt struct {
	t *testing.T
	c *safetensors.Checkpoint
}

func openCkpt(t *testing.T, dir string) ckpt {
	t.Helper()
	c, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ckpt{t, c}
}

func (k ckpt) tensor(name string) (safetensors.Tensor, []byte) {
	k.t.Helper()
	sh, tn, ok := k.c.Lookup(name)
	if !ok {
		k.t.Fatalf("%s: no tensor %s", k.c.Dir, name)
	}
	f, err := os.Open(sh.Path)
	if err != nil {
		k.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, tn.Size)
	if _, err := f.ReadAt(b, tn.Offset); err != nil {
		k.t.Fatalf("%s: reading %s: %v", sh.Path, name, err)
	}
	return tn, b
}

// floats decodes an F32 or BF16 tensor (independently of the package's
// encoders).
func (k ckpt) floats(name string) (safetensors.Tensor, []float64) {
	k.t.Helper()
	tn, b := k.tensor(name)
	var out []float64
	switch tn.DType {
	case safetensors.F32:
		for i := 0; i < len(b); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
	case safetensors.BF16:
		for i := 0; i < len(b); i += 2 {
			out = append(out, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i:]))<<16)))
		}
	default:
		k.t.Fatalf("%s: dtype %s is not a float type", name, tn.DType)
	}
	return tn, out
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func sameShape(a []int64, b ...int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
