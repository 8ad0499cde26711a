package safetensors

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// FuzzReadHeader feeds arbitrary files to ReadHeader. Whatever it accepts
// must satisfy every promise of Header, and must survive a rewrite through
// PlanFile; whatever it refuses must be refused with an error naming the
// file. Seeds: testdata/fuzz/FuzzReadHeader plus the hand-corrupted table.
func FuzzReadHeader(f *testing.F) {
	for _, tc := range badHeaders {
		f.Add(tc.file)
	}
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}}`, 8))
	f.Fuzz(func(t *testing.T, data []byte) {
		size := int64(len(data))
		h, err := ReadHeader(bytes.NewReader(data), size, "fuzz.safetensors")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.safetensors: ") {
				t.Fatalf("error without file name: %v", err)
			}
			return
		}
		if h.DataStart < 8 || h.DataStart > size || h.FileSize != size {
			t.Fatalf("DataStart %d FileSize %d size %d", h.DataStart, h.FileSize, size)
		}
		seen := map[string]bool{}
		var maxEnd int64
		for i, tn := range h.Tensors {
			if seen[tn.Name] || tn.Name == "" {
				t.Fatalf("name %q repeated or empty", tn.Name)
			}
			seen[tn.Name] = true
			n := tn.NumElements()
			if tn.DType.Size() == 0 || n < 0 || n*int64(tn.DType.Size()) != tn.Size {
				t.Fatalf("%s: dtype %s shape %v size %d", tn.Name, tn.DType, tn.Shape, tn.Size)
			}
			if tn.Offset < h.DataStart || tn.Size < 0 || tn.Offset+tn.Size > size {
				t.Fatalf("%s: [%d, +%d) outside data area [%d, %d)", tn.Name, tn.Offset, tn.Size, h.DataStart, size)
			}
			if i > 0 {
				p := h.Tensors[i-1]
				if p.Offset > tn.Offset || p.Offset == tn.Offset && p.Name >= tn.Name {
					t.Fatalf("not sorted: %s before %s", p.Name, tn.Name)
				}
			}
			if tn.Size > 0 {
				if tn.Offset < maxEnd {
					t.Fatalf("%s overlaps", tn.Name)
				}
				maxEnd = tn.Offset + tn.Size
			}
			if got, ok := h.Tensor(tn.Name); !ok || got.Offset != tn.Offset {
				t.Fatalf("Tensor(%q) = %v, %v", tn.Name, got, ok)
			}
		}
		// Rewrite the same tensors and read them back.
		specs := make([]Spec, len(h.Tensors))
		for i, tn := range h.Tensors {
			specs[i] = Spec{tn.Name, tn.DType, tn.Shape}
		}
		p, err := PlanFile(specs, h.Metadata)
		if err != nil {
			t.Fatalf("PlanFile of an accepted header: %v", err)
		}
		file := append([]byte(nil), p.Header...)
		file = append(file, make([]byte, p.Size-int64(len(p.Header)))...)
		h2, err := ReadHeader(bytes.NewReader(file), int64(len(file)), "rewrite")
		if err != nil {
			t.Fatalf("re-reading a planned file: %v", err)
		}
		if len(h2.Tensors) != len(h.Tensors) || fmt.Sprint(h2.Metadata) != fmt.Sprint(h.Metadata) || !h2.Contiguous() {
			t.Fatalf("rewrite differs: %+v vs %+v", h2, h)
		}
		for _, tn := range h.Tensors {
			t2, ok := h2.Tensor(tn.Name)
			if !ok || t2.DType != tn.DType || t2.Size != tn.Size || fmt.Sprint(t2.Shape) != fmt.Sprint(tn.Shape) {
				t.Fatalf("%s: rewrite gave %v", tn.Name, t2)
			}
		}
	})
}

// FuzzParseIndex feeds arbitrary JSON to ParseIndex; accepted indexes must
// have a non-empty weight map of plain shard names.
func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":10},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := ParseIndex(data, "fuzz.index.json")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.index.json: ") {
				t.Fatalf("error without file name: %v", err)
			}
			return
		}
		if len(ix.WeightMap) == 0 || ix.TotalSize < -1 {
			t.Fatalf("accepted %+v", ix)
		}
		shards := ix.Shards()
		for i, s := range shards {
			if s == "" || s == "." || s == ".." || strings.ContainsAny(s, `/\:`) {
				t.Fatalf("bad shard name %q accepted", s)
			}
			if i > 0 && shards[i-1] >= s {
				t.Fatalf("Shards not sorted and unique: %v", shards)
			}
		}
	})
}
