package qpack

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/qpack-go/qpack/safetensors"
)

// StrideAlign is the granularity of an expert's stride: every expert blob
// starts on a multiple of 16 KiB in its layer file. It is a format constant,
// not the host's page size.
const StrideAlign = 16384

// Limits a reader applies to a layout.
const (
	MaxLayers      = 1024
	MaxExperts     = 65536
	MaxLayoutSize  = 1 << 20
	maxSections    = 64
	maxDims        = 8
	maxSectionName = 128
)

// Section names are "<projection>.<part>"; v1 knows these, and a section
// table lists those present in this order (projection-major).
var (
	Projections  = []string{"gate_proj", "up_proj", "down_proj"}
	SectionParts = []string{"weight", "scales", "biases"}
)

// sectionRank gives the canonical position of a section name, or -1.
func sectionRank(name string) int {
	proj, part, ok := strings.Cut(name, ".")
	if !ok {
		return -1
	}
	for i, p := range Projections {
		if p != proj {
			continue
		}
		for j, q := range SectionParts {
			if q == part {
				return i*len(SectionParts) + j
			}
		}
	}
	return -1
}

// Section is one tensor slice inside every expert blob.
type Section struct {
	Name   string            // "gate_proj.weight", "down_proj.biases", ...
	DType  safetensors.DType // "U32" for packed quantized weights, "BF16", ...
	Shape  []int64           // the shape of one expert's slice
	Offset int64             // byte offset within the expert blob
	Size   int64             // bytes: dtype size x product(Shape)
}

// SectionSpec is what NewLayout needs to place a section.
type SectionSpec struct {
	Name  string
	DType safetensors.DType
	Shape []int64
}

// Layout is packed_experts/layout.json: one section table that serves every
// layer, the expert stride, and which layers use linear attention.
type Layout struct {
	ExpertCount  int
	LayerCount   int
	ExpertStride int64
	Sections     []Section
	LinearLayers []bool
}

// NewLayout places sections back to back from offset 0, in the order given
// (which must be the canonical one), and sets the stride to the payload
// rounded up to StrideAlign. linear must have layerCount entries.
func NewLayout(expertCount, layerCount int, linear []bool, sections []SectionSpec) (*Layout, error) {
	l := &Layout{
		ExpertCount:  expertCount,
		LayerCount:   layerCount,
		LinearLayers: append([]bool(nil), linear...),
	}
	var off int64
	for _, s := range sections {
		size, err := sectionBytes(s.DType, s.Shape)
		if err != nil {
			return nil, errf(LayoutName, "section "+s.Name, "%v", err)
		}
		l.Sections = append(l.Sections, Section{
			Name: s.Name, DType: s.DType, Shape: append([]int64(nil), s.Shape...),
			Offset: off, Size: size,
		})
		if off > math.MaxInt64-size {
			return nil, errf(LayoutName, "section "+s.Name, "payload size overflows int64")
		}
		off += size
	}
	if off > math.MaxInt64-StrideAlign {
		return nil, errf(LayoutName, "", "payload size overflows int64")
	}
	l.ExpertStride = (off + StrideAlign - 1) / StrideAlign * StrideAlign
	if len(sections) == 0 {
		l.ExpertStride = 0 // Validate reports the empty table
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// sectionBytes returns dtype size x product(shape), refusing unknown dtypes,
// bad ranks, non-positive dims and overflow.
func sectionBytes(dt safetensors.DType, shape []int64) (int64, error) {
	if _, err := safetensors.ParseDType(string(dt)); err != nil {
		return 0, err
	}
	if len(shape) == 0 || len(shape) > maxDims {
		return 0, fmt.Errorf("shape %v: want 1 to %d dimensions", shape, maxDims)
	}
	n := int64(dt.Size())
	for _, d := range shape {
		if d <= 0 {
			return 0, fmt.Errorf("shape %v: dimensions must be positive", shape)
		}
		if n > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v with dtype %s: byte size overflows int64", shape, dt)
		}
		n *= d
	}
	return n, nil
}

// Payload returns the number of meaningful bytes in an expert blob: the end
// of the last section.
func (l *Layout) Payload() int64 {
	var end int64
	for _, s := range l.Sections {
		if e := s.Offset + s.Size; e > end {
			end = e
		}
	}
	return end
}

// LayerSize returns the size of every layer file: ExpertCount x ExpertStride.
func (l *Layout) LayerSize() int64 { return int64(l.ExpertCount) * l.ExpertStride }

// Section returns the section called name.
func (l *Layout) Section(name string) (Section, bool) {
	for _, s := range l.Sections {
		if s.Name == name {
			return s, true
		}
	}
	return Section{}, false
}

// ExpertOffset returns the byte offset of expert e in its layer file.
func (l *Layout) ExpertOffset(e int) (int64, error) {
	if e < 0 || e >= l.ExpertCount {
		return 0, fmt.Errorf("qpack: expert %d out of range [0, %d)", e, l.ExpertCount)
	}
	return int64(e) * l.ExpertStride, nil
}

// Validate checks every rule of the layout: counts in range, one
// linearLayers entry per layer, a non-empty section table of known names in
// canonical order with a weight for each projection, each section's size
// equal to dtype size x product(shape) (overflow-checked), sections in
// increasing offset order without overlap, a stride that is a positive
// multiple of StrideAlign at least the payload, and ExpertCount x stride
// that fits in an int64.
func (l *Layout) Validate() error {
	const file = LayoutName
	if l.LayerCount < 1 || l.LayerCount > MaxLayers {
		return errf(file, "layerCount", "%d is out of range [1, %d]", l.LayerCount, MaxLayers)
	}
	if l.ExpertCount < 1 || l.ExpertCount > MaxExperts {
		return errf(file, "expertCount", "%d is out of range [1, %d]", l.ExpertCount, MaxExperts)
	}
	if len(l.LinearLayers) != l.LayerCount {
		return errf(file, "linearLayers", "has %d entries, want one per layer (%d)", len(l.LinearLayers), l.LayerCount)
	}
	if len(l.Sections) == 0 {
		return errf(file, "sections", "empty")
	}
	if len(l.Sections) > maxSections {
		return errf(file, "sections", "more than %d entries", maxSections)
	}
	prevRank := -1
	var prevEnd int64
	hasWeight := make(map[string]bool)
	hasPart := make(map[string]bool)
	for i, s := range l.Sections {
		key := fmt.Sprintf("sections[%d] %q", i, truncate(s.Name, maxSectionName))
		rank := sectionRank(s.Name)
		if rank < 0 {
			return errf(file, key, "unknown section name (want <%s>.<%s>)", strings.Join(Projections, "|"), strings.Join(SectionParts, "|"))
		}
		if rank <= prevRank {
			return errf(file, key, "out of order or repeated (order is %s x %s)", strings.Join(Projections, ", "), strings.Join(SectionParts, ", "))
		}
		prevRank = rank
		proj, part, _ := strings.Cut(s.Name, ".")
		hasPart[proj] = true
		if part == "weight" {
			hasWeight[proj] = true
		}
		want, err := sectionBytes(s.DType, s.Shape)
		if err != nil {
			return errf(file, key, "%v", err)
		}
		if s.Size != want {
			return errf(file, key, "size %d, but dtype %s x shape %v is %d bytes", s.Size, s.DType, s.Shape, want)
		}
		if s.Offset < 0 {
			return errf(file, key, "negative offset %d", s.Offset)
		}
		if s.Offset < prevEnd {
			return errf(file, key, "offset %d overlaps the previous section, which ends at %d", s.Offset, prevEnd)
		}
		if s.Offset > math.MaxInt64-s.Size {
			return errf(file, key, "offset %d + size %d overflows int64", s.Offset, s.Size)
		}
		prevEnd = s.Offset + s.Size
	}
	for _, p := range Projections {
		if !hasWeight[p] {
			if hasPart[p] {
				return errf(file, "sections", "%s has scales or biases but no %s.weight", p, p)
			}
			return errf(file, "sections", "no %s.weight section", p)
		}
	}
	if l.ExpertStride <= 0 || l.ExpertStride%StrideAlign != 0 {
		return errf(file, "expertStride", "%d is not a positive multiple of %d", l.ExpertStride, StrideAlign)
	}
	if l.ExpertStride < prevEnd {
		return errf(file, "expertStride", "%d is smaller than the payload, whose last section ends at byte %d", l.ExpertStride, prevEnd)
	}
	if l.ExpertStride > math.MaxInt64/int64(l.ExpertCount) {
		return errf(file, "expertStride", "expertCount %d x stride %d overflows int64", l.ExpertCount, l.ExpertStride)
	}
	return nil
}

type layoutJSON struct {
	ExpertCount  int           `json:"expertCount"`
	LayerCount   int           `json:"layerCount"`
	ExpertStride int64         `json:"expertStride"`
	Sections     []sectionJSON `json:"sections"`
	LinearLayers []bool        `json:"linearLayers"`
}

type sectionJSON struct {
	Name   string  `json:"name"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Offset int64   `json:"offset"`
	Size   int64   `json:"size"`
}

// Marshal validates l and encodes it as layout.json (sorted keys, two-space
// indentation, trailing newline).
func (l *Layout) Marshal() ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	j := layoutJSON{ExpertCount: l.ExpertCount, LayerCount: l.LayerCount,
		ExpertStride: l.ExpertStride, LinearLayers: l.LinearLayers}
	for _, s := range l.Sections {
		j.Sections = append(j.Sections, sectionJSON{s.Name, string(s.DType), s.Shape, s.Offset, s.Size})
	}
	b, err := marshalSorted(j)
	if err != nil {
		return nil, &Error{File: LayoutName, Err: err}
	}
	return b, nil
}

// ParseLayout decodes and validates packed_experts/layout.json. Unknown keys
// are ignored.
func ParseLayout(data []byte) (*Layout, error) {
	const file = LayoutName
	if len(data) > MaxLayoutSize {
		return nil, errf(file, "", "%d bytes, more than the limit of %d", len(data), MaxLayoutSize)
	}
	fields, err := objectFields(data)
	if err != nil {
		return nil, errf(file, "", "%v", err)
	}
	l := &Layout{}
	need := func(key string) (json.RawMessage, error) {
		raw, ok := fields[key]
		if !ok {
			return nil, errf(file, key, "missing")
		}
		return raw, nil
	}
	for _, k := range []struct {
		key      string
		dst      *int
		min, max int64
	}{{"expertCount", &l.ExpertCount, 1, MaxExperts}, {"layerCount", &l.LayerCount, 1, MaxLayers}} {
		raw, err := need(k.key)
		if err != nil {
			return nil, err
		}
		n, err := decodeInt(raw)
		if err != nil {
			return nil, errf(file, k.key, "%v", err)
		}
		if n < k.min || n > k.max {
			return nil, errf(file, k.key, "%d is out of range [%d, %d]", n, k.min, k.max)
		}
		*k.dst = int(n)
	}
	raw, err := need("expertStride")
	if err != nil {
		return nil, err
	}
	if l.ExpertStride, err = decodeInt(raw); err != nil {
		return nil, errf(file, "expertStride", "%v", err)
	}

	raw, err = need("linearLayers")
	if err != nil {
		return nil, err
	}
	els, err := decodeArray(raw, MaxLayers)
	if err != nil {
		return nil, errf(file, "linearLayers", "%v", err)
	}
	for i, el := range els {
		b, err := decodeBool(el)
		if err != nil {
			return nil, errf(file, fmt.Sprintf("linearLayers[%d]", i), "%v", err)
		}
		l.LinearLayers = append(l.LinearLayers, b)
	}

	raw, err = need("sections")
	if err != nil {
		return nil, err
	}
	els, err = decodeArray(raw, maxSections)
	if err != nil {
		return nil, errf(file, "sections", "%v", err)
	}
	for i, el := range els {
		key := fmt.Sprintf("sections[%d]", i)
		sf, err := objectFields(el)
		if err != nil {
			return nil, errf(file, key, "%v", err)
		}
		var s Section
		for _, k := range []string{"name", "dtype", "shape", "offset", "size"} {
			if _, ok := sf[k]; !ok {
				return nil, errf(file, key, "missing %q", k)
			}
		}
		if s.Name, err = decodeString(sf["name"]); err != nil {
			return nil, errf(file, key+".name", "%v", err)
		}
		if len(s.Name) > maxSectionName {
			return nil, errf(file, key+".name", "longer than %d bytes", maxSectionName)
		}
		key = fmt.Sprintf("sections[%d] %q", i, s.Name)
		dt, err := decodeString(sf["dtype"])
		if err != nil {
			return nil, errf(file, key+".dtype", "%v", err)
		}
		s.DType = safetensors.DType(dt)
		dims, err := decodeArray(sf["shape"], maxDims)
		if err != nil {
			return nil, errf(file, key+".shape", "%v", err)
		}
		for j, d := range dims {
			v, err := decodeInt(d)
			if err != nil {
				return nil, errf(file, fmt.Sprintf("%s.shape[%d]", key, j), "%v", err)
			}
			s.Shape = append(s.Shape, v)
		}
		if s.Offset, err = decodeInt(sf["offset"]); err != nil {
			return nil, errf(file, key+".offset", "%v", err)
		}
		if s.Size, err = decodeInt(sf["size"]); err != nil {
			return nil, errf(file, key+".size", "%v", err)
		}
		l.Sections = append(l.Sections, s)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}
