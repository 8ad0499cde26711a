package qpack

import (
	"reflect"
	"testing"
)

// FuzzParseManifest: no input may panic; whatever parses must survive a
// Marshal/Parse round trip unchanged.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(newSwiftFixture().swiftManifest("")))
	f.Add([]byte(`{"magic":"QPACK","version":1,"modelName":"m","sourceCheckpoint":"s","files":{"model.safetensors":8,"packed_experts/layout.json":2}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if m != nil {
				t.Fatal("non-nil manifest with an error")
			}
			return
		}
		b, err := m.Marshal()
		if err != nil {
			t.Fatalf("parsed manifest does not marshal: %v", err)
		}
		m2, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("marshalled manifest does not parse: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
	})
}

// FuzzParseLayout: no input may panic; whatever parses satisfies the
// layout's invariants and survives a Marshal/Parse round trip.
func FuzzParseLayout(f *testing.F) {
	f.Add([]byte(swiftLayout))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLayout(data)
		if err != nil {
			return
		}
		if l.ExpertStride%StrideAlign != 0 || l.Payload() > l.ExpertStride || l.LayerSize() <= 0 ||
			len(l.LinearLayers) != l.LayerCount || len(l.Sections) == 0 {
			t.Fatalf("invariant broken: %+v", l)
		}
		var end int64
		for _, s := range l.Sections {
			if s.Offset < end || s.Size <= 0 {
				t.Fatalf("section %s at %d size %d after end %d", s.Name, s.Offset, s.Size, end)
			}
			end = s.Offset + s.Size
		}
		b, err := l.Marshal()
		if err != nil {
			t.Fatalf("parsed layout does not marshal: %v", err)
		}
		l2, err := ParseLayout(b)
		if err != nil {
			t.Fatalf("marshalled layout does not parse: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(l, l2) {
			t.Fatalf("round trip changed the layout:\n%+v\n%+v", l, l2)
		}
	})
}
