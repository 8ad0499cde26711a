package safetensors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	nst "github.com/nlpodyssey/safetensors"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/safetensors"
)

// github.com/nlpodyssey/safetensors (a port of the Hugging Face reference
// library, asked for by the user) serves here as an independent reader of
// every safetensors file qpack writes: the safetensors writer's output, the
// tiny checkpoints in testdata/tiny, and the dense file (model.safetensors)
// of containers repacked from them. Each file is read whole by it and by
// this package, and every tensor's name, dtype, shape and bytes, and the
// metadata, must agree; for the container, the dense tensors must also be
// the source checkpoint's tensors as that library reads them.
//
// Its limits, tested below so they stay known: it reads a whole file from
// memory (no streaming, so it is no use to qpack itself); it knows the
// dtypes BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64
// and refuses a file holding any other (F8_E4M3, F8_E5M2, F8_E8M0,
// F8_E4M3FNUZ, F8_E5M2FNUZ, C64, which this package writes); it requires the
// tensors back to back from offset 0 with no trailing bytes (as this
// package writes them).

// oracleDTypes are the dtypes the oracle reads.
var oracleDTypes = []safetensors.DType{
	safetensors.BOOL, safetensors.U8, safetensors.I8, safetensors.I16, safetensors.U16, safetensors.F16,
	safetensors.BF16, safetensors.I32, safetensors.U32, safetensors.F32, safetensors.F64, safetensors.I64, safetensors.U64,
}

// beyondOracle are dtypes this package writes and the oracle cannot read.
var beyondOracle = []safetensors.DType{
	safetensors.F8E4M3, safetensors.F8E5M2, safetensors.F8E8M0, safetensors.F8E4M3FNUZ, safetensors.F8E5M2FNUZ, safetensors.C64,
}

// oracleTensor is one tensor as the oracle read it.
type oracleTensor struct {
	dtype string
	shape []int64
	data  []byte
}

// readOracle parses a whole safetensors file with the oracle.
func readOracle(data []byte) (map[string]oracleTensor, map[string]string, error) {
	st, err := nst.Deserialize(data)
	if err != nil {
		return nil, nil, err
	}
	_, md, err := nst.ReadMetadata(data)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]oracleTensor{}
	for _, v := range st.Tensors() {
		shape := make([]int64, len(v.TensorView.Shape()))
		for i, d := range v.TensorView.Shape() {
			shape[i] = int64(d)
		}
		out[v.Name] = oracleTensor{dtype: v.TensorView.DType().String(), shape: shape, data: v.TensorView.Data()}
	}
	return out, md.Metadata(), nil
}

// agree reads the file at path with both readers and fails t on any
// difference; it returns the oracle's tensors.
func agree(t *testing.T, path string) map[string]oracleTensor {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return agreeBytes(t, path, data)
}

func agreeBytes(t *testing.T, name string, data []byte) map[string]oracleTensor {
	t.Helper()
	theirs, theirMeta, err := readOracle(data)
	if err != nil {
		t.Fatalf("%s: the oracle cannot read it: %v", name, err)
	}
	ours, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)), name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(ours.Tensors) != len(theirs) {
		t.Errorf("%s: %d tensors, the oracle reads %d", name, len(ours.Tensors), len(theirs))
	}
	for _, ot := range ours.Tensors {
		th, ok := theirs[ot.Name]
		switch {
		case !ok:
			t.Errorf("%s: tensor %s is not in the oracle's reading", name, ot.Name)
		case th.dtype != string(ot.DType):
			t.Errorf("%s: tensor %s: dtype %s, the oracle reads %s", name, ot.Name, ot.DType, th.dtype)
		case !slices.Equal(th.shape, ot.Shape):
			t.Errorf("%s: tensor %s: shape %v, the oracle reads %v", name, ot.Name, ot.Shape, th.shape)
		case !bytes.Equal(th.data, data[ot.Offset:ot.Offset+ot.Size]):
			t.Errorf("%s: tensor %s: its %d bytes differ from the oracle's", name, ot.Name, ot.Size)
		}
	}
	if len(ours.Metadata) != len(theirMeta) {
		t.Errorf("%s: metadata %v, the oracle reads %v", name, ours.Metadata, theirMeta)
	}
	for k, v := range ours.Metadata {
		if theirMeta[k] != v {
			t.Errorf("%s: metadata %q = %q, the oracle reads %q", name, k, v, theirMeta[k])
		}
	}
	return theirs
}

// oracleSpecs is a file of every dtype the oracle reads, with a scalar,
// an empty tensor and odd shapes, and random contents.
func oracleSpecs(seed int64) ([]safetensors.Spec, [][]byte) {
	rng := rand.New(rand.NewSource(seed))
	var specs []safetensors.Spec
	var data [][]byte
	shapes := [][]int64{{3}, {2, 5}, nil, {0, 4}, {1, 3, 7}}
	for i, dt := range oracleDTypes {
		shape := shapes[i%len(shapes)]
		n := int64(dt.Size())
		for _, d := range shape {
			n *= d
		}
		b := make([]byte, n)
		rng.Read(b)
		if dt == safetensors.BOOL {
			for j := range b {
				b[j] &= 1
			}
		}
		specs = append(specs, safetensors.Spec{Name: fmt.Sprintf("t%02d.%s", i, strings.ToLower(string(dt))), DType: dt, Shape: shape})
		data = append(data, b)
	}
	return specs, data
}

// TestOracleReadsWriterOutput: files written by WriteFile and by Writer
// read the same with the oracle, and each tensor holds the bytes given.
func TestOracleReadsWriterOutput(t *testing.T) {
	specs, data := oracleSpecs(1)
	meta := map[string]string{"format": "mlx", "note": "written by qpack's tests"}
	path := filepath.Join(t.TempDir(), "all.safetensors")
	err := safetensors.WriteFile(path, specs, meta, func(i int, _ safetensors.Spec) (io.Reader, error) {
		return bytes.NewReader(data[i]), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	theirs := agree(t, path)
	for i, s := range specs {
		if got := theirs[s.Name]; !bytes.Equal(got.data, data[i]) {
			t.Errorf("tensor %s: the oracle reads %x, written %x", s.Name, got.data, data[i])
		}
	}

	// The streaming Writer, tensors in reverse name order, no metadata.
	slices.Reverse(specs)
	slices.Reverse(data)
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		if err := w.WriteTensor(s.Name, bytes.NewReader(data[i])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	theirs = agreeBytes(t, "streamed", buf.Bytes())
	for i, s := range specs {
		if got := theirs[s.Name]; !bytes.Equal(got.data, data[i]) {
			t.Errorf("streamed tensor %s: the oracle reads %x, written %x", s.Name, got.data, data[i])
		}
	}
}

// TestOracleLimits records what the oracle cannot read: a file holding a
// dtype beyond its list is refused whole (this package reads it).
func TestOracleLimits(t *testing.T) {
	for _, dt := range beyondOracle {
		specs := []safetensors.Spec{{Name: "scale", DType: safetensors.F32, Shape: []int64{2}}, {Name: "w", DType: dt, Shape: []int64{4}}}
		p, err := safetensors.PlanFile(specs, nil)
		if err != nil {
			t.Fatal(err)
		}
		file := append(append([]byte{}, p.Header...), make([]byte, p.Size-int64(len(p.Header)))...)
		if _, err := safetensors.ReadHeader(bytes.NewReader(file), int64(len(file)), string(dt)); err != nil {
			t.Errorf("%s: this package cannot read its own file: %v", dt, err)
		}
		if _, _, err := readOracle(file); err == nil {
			t.Errorf("%s: the oracle now reads it: move it to oracleDTypes", dt)
		} else {
			t.Logf("%s: the oracle refuses the file: %v", dt, err)
		}
	}
}

// TestOracleWrittenReadByUs is the other direction: a file the oracle
// serializes reads the same here. (Its NewTensorView counts a scalar,
// shape [], as 0 elements, unlike its own reader and the format: scalars
// are left out of this direction.)
func TestOracleWrittenReadByUs(t *testing.T) {
	specs, data := oracleSpecs(2)
	views := map[string]nst.TensorView{}
	for i := 0; i < len(specs); i++ {
		if len(specs[i].Shape) == 0 {
			specs = slices.Delete(specs, i, i+1)
			data = slices.Delete(data, i, i+1)
			i--
		}
	}
	for i, s := range specs {
		dt, err := nst.ParseDType(string(s.DType))
		if err != nil {
			t.Fatal(err)
		}
		shape := make([]uint64, len(s.Shape))
		for j, d := range s.Shape {
			shape[j] = uint64(d)
		}
		v, err := nst.NewTensorView(dt, shape, data[i])
		if err != nil {
			t.Fatal(err)
		}
		views[s.Name] = v
	}
	file, err := nst.Serialize(views, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	agreeBytes(t, "oracle-written", file)
	h, err := safetensors.ReadHeader(bytes.NewReader(file), int64(len(file)), "oracle-written")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		ot, ok := h.Tensor(s.Name)
		if !ok || ot.DType != s.DType || !bytes.Equal(file[ot.Offset:ot.Offset+ot.Size], data[i]) {
			t.Errorf("tensor %s: read %+v here", s.Name, ot)
		}
	}
}

// tinyDirs lists the committed tiny checkpoints.
func tinyDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("..", "testdata", "tiny", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, "config.json")); err == nil && !st.IsDir() {
			out = append(out, d)
		}
	}
	if len(out) < 6 {
		t.Fatalf("only %d tiny checkpoints under testdata/tiny", len(out))
	}
	sort.Strings(out)
	return out
}

// checkpointTensors reads every shard of a checkpoint with the oracle
// (after checking that both readers agree on each) and checks the index,
// if any, against what the shards hold.
func checkpointTensors(t *testing.T, dir string) map[string]oracleTensor {
	t.Helper()
	shards, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(shards) == 0 {
		t.Fatalf("%s: no shards (%v)", dir, err)
	}
	all := map[string]oracleTensor{}
	where := map[string]string{}
	for _, sh := range shards {
		for name, ot := range agree(t, sh) {
			if prev, dup := where[name]; dup {
				t.Errorf("%s: tensor %s is in %s and %s", dir, name, prev, filepath.Base(sh))
			}
			all[name] = ot
			where[name] = filepath.Base(sh)
		}
	}
	// The index, read with encoding/json rather than this package.
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, safetensors.IndexFile))
	if err == nil {
		err = json.Unmarshal(raw, &idx)
	}
	if err == nil {
		if len(idx.WeightMap) != len(all) {
			t.Errorf("%s: the index maps %d tensors, the shards hold %d", dir, len(idx.WeightMap), len(all))
		}
		for name, file := range idx.WeightMap {
			if where[name] != file {
				t.Errorf("%s: the index puts %s in %s, the oracle finds it in %q", dir, name, file, where[name])
			}
		}
	} else if len(shards) > 1 {
		t.Errorf("%s: %d shards and no readable index: %v", dir, len(shards), err)
	}
	return all
}

// TestOracleReadsTinyCheckpoints: every shard of every committed tiny
// checkpoint reads the same with the oracle.
func TestOracleReadsTinyCheckpoints(t *testing.T) {
	for _, dir := range tinyDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			if n := len(checkpointTensors(t, dir)); n == 0 {
				t.Fatal("no tensors")
			}
		})
	}
}

// TestOracleReadsContainerDense: the dense file of a container repacked
// from each tiny checkpoint reads the same with the oracle, and each of
// its tensors is the source's tensor of that name (name, dtype, shape,
// bytes) as the oracle reads the source's shards.
func TestOracleReadsContainerDense(t *testing.T) {
	for _, dir := range tinyDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "tiny.qpack")
			_, err := repack.Run(context.Background(), repack.Options{FromDir: dir, Output: out, Reserve: -1,
				ToolVersion: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			dense := agree(t, filepath.Join(out, qpack.DenseName))
			src := checkpointTensors(t, dir)
			if len(dense) == 0 {
				t.Fatal("the container's dense file holds no tensors")
			}
			for name, d := range dense {
				s, ok := src[name]
				switch {
				case !ok:
					t.Errorf("dense tensor %s is not in the source", name)
				case s.dtype != d.dtype || !slices.Equal(s.shape, d.shape):
					t.Errorf("dense tensor %s: %s%v, the source's is %s%v", name, d.dtype, d.shape, s.dtype, s.shape)
				case !bytes.Equal(s.data, d.data):
					t.Errorf("dense tensor %s: bytes differ from the source's", name)
				}
			}
		})
	}
}
