package metal

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/qpack-go/qpack/internal/gpukernels"
)

//go:embed kernels/*.metal
var kernelFS embed.FS

var (
	sourceOnce sync.Once
	sourceText string
	sourceLib  *library
	sourceErr  error
)

// Source returns the Metal Shading Language source of every kernel: the
// files of metal/kernels in name order, concatenated, with the kernel
// bodies shared with the CUDA backend (sharedBodies, written in the
// dialect that kernels/01_prelude.metal implements for MSL) inserted after
// the files numbered below 10 (the common definitions and the prelude) and
// before the Metal-only kernels. It is compiled at run time
// (newLibraryWithSource:options:error:), so no Metal toolchain is needed
// to build qpack.
func Source() string {
	loadSource()
	return sourceText
}

func loadSource() {
	sourceOnce.Do(func() {
		names, err := fs.Glob(kernelFS, "kernels/*.metal")
		if err != nil {
			sourceErr = err
			return
		}
		sort.Strings(names)
		var b strings.Builder
		shared := false
		for _, n := range names {
			if !shared && path.Base(n) >= "10" {
				writeShared(&b)
				shared = true
			}
			data, err := kernelFS.ReadFile(n)
			if err != nil {
				sourceErr = err
				return
			}
			fmt.Fprintf(&b, "// ---- %s ----\n", n)
			b.Write(data)
			if len(data) > 0 && data[len(data)-1] != '\n' {
				b.WriteByte('\n')
			}
		}
		if !shared {
			writeShared(&b)
		}
		sourceText = b.String()
		sourceLib, sourceErr = parseLibrary(sourceText)
	})
}

// sharedBodies returns the kernel bodies shared with the CUDA backend, in
// the dialect of kernels/01_prelude.metal (internal/gpukernels).
var sharedBodies = gpukernels.Bodies

func writeShared(b *strings.Builder) {
	body := sharedBodies()
	if body == "" {
		return
	}
	b.WriteString("// ---- internal/gpukernels (shared bodies) ----\n")
	b.WriteString(body)
	if body[len(body)-1] != '\n' {
		b.WriteByte('\n')
	}
}

// kernelLibrary returns the parsed kernel signatures and parameter structs of
// Source.
func kernelLibrary() (*library, error) {
	loadSource()
	return sourceLib, sourceErr
}

// library is what the host needs to know about the kernels: their buffer
// parameters and the layout of their parameter structs.
type library struct {
	kernels map[string]*kernelSig
	structs map[string]*structLayout
	names   []string // kernel names in source order
}

// kernelSig is one kernel's parameter list.
type kernelSig struct {
	Name    string
	Params  []kernelParam
	Buffers int    // buffer parameters, indices 0..Buffers-1
	Struct  string // the constant parameter struct (the last buffer)
	// Entry marks a kernel of the shared dialect (QP_ENTRY): its only
	// buffer is the parameter struct, whose QP_GLOBAL pointer fields hold
	// GPU addresses; the ids are the ones entryParams lists.
	Entry bool
}

// entryParams is the parameter list QP_ENTRY(name, P) declares (see
// kernels/01_prelude.metal; TestPreludeEntryMatches keeps the two equal).
func entryParams(st string) []kernelParam {
	return []kernelParam{
		{Type: "constant " + st + "&", Name: "p", Attr: "buffer", Index: 0},
		{Type: "uint3", Name: "qp_tgid", Attr: "threadgroup_position_in_grid", Index: -1},
		{Type: "uint", Name: "qp_tid", Attr: "thread_index_in_threadgroup", Index: -1},
		{Type: "uint", Name: "qp_lane", Attr: "thread_index_in_simdgroup", Index: -1},
		{Type: "uint", Name: "qp_simd_id", Attr: "simdgroup_index_in_threadgroup", Index: -1},
	}
}

// kernelParam is one parameter: its declared type (address space
// included), name, and attribute ("buffer" with Index, or a position
// attribute such as "thread_position_in_grid").
type kernelParam struct {
	Type, Name, Attr string
	Index            int
}

// Writable reports whether a buffer parameter may be written (it is not
// declared const).
func (p kernelParam) Writable() bool {
	return p.Attr == "buffer" && !reConstWord.MatchString(p.Type) &&
		!strings.HasPrefix(strings.TrimSpace(p.Type), "constant")
}

// structLayout is a parameter struct laid out as both Metal and the C++
// shim lay it out (natural alignment).
type structLayout struct {
	Name   string
	Size   int
	Fields map[string]structField
	Order  []string
}

// structField is one field; Type is the scalar type, or "ptr" / "cptr" for
// a QP_GLOBAL pointer (a 64-bit GPU address; cptr points to const data).
type structField struct {
	Type   string
	Offset int
	Size   int
}

// Pointer reports whether the field is a QP_GLOBAL pointer.
func (f structField) Pointer() bool { return f.Type == "ptr" || f.Type == "cptr" }

// PositionAttrs are the kernel-parameter attributes the host and the shim
// support, with whether they are vectors (uint3) or scalars.
var positionAttrs = map[string]bool{
	"thread_position_in_grid":        true,
	"threadgroup_position_in_grid":   true,
	"thread_position_in_threadgroup": true,
	"threads_per_threadgroup":        true,
	"threadgroups_per_grid":          true,
	"threads_per_grid":               true,
	"thread_index_in_threadgroup":    false,
	"thread_index_in_simdgroup":      false,
	"simdgroup_index_in_threadgroup": false,
	"threads_per_simdgroup":          false,
	"simdgroups_per_threadgroup":     false,
}

var scalarSizes = map[string]int{
	"ulong": 8, "long": 8, "uint": 4, "int": 4, "float": 4,
	"ushort": 2, "short": 2, "half": 2, "uchar": 1, "char": 1,
}

var (
	reLineComment  = regexp.MustCompile(`//[^\n]*`)
	reBlockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	reKernel       = regexp.MustCompile(`\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(`)
	reStruct       = regexp.MustCompile(`\bstruct\s+([A-Za-z_]\w*)\s*\{([^}]*)\}\s*;`)
	reParam        = regexp.MustCompile(`^(.*?)\b([A-Za-z_]\w*)\s*\[\[\s*([A-Za-z_]\w*)\s*(?:\(\s*(\d+)\s*\))?\s*\]\]$`)
	reField        = regexp.MustCompile(`^([A-Za-z_]\w*)\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)$`)
	reConstRef     = regexp.MustCompile(`^constant\s+([A-Za-z_]\w*)\s*&$`)
	rePtrField     = regexp.MustCompile(`^QP_GLOBAL\s+(const\s+)?([A-Za-z_]\w*)\s*\*\s*([A-Za-z_]\w*)$`)
	reEntry        = regexp.MustCompile(`\bQP_ENTRY\s*\(\s*([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*\)`)
	rePreproc      = regexp.MustCompile(`(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*`)
	reConstWord    = regexp.MustCompile(`\bconst\b`)
)

// stripComments removes comments and preprocessor lines (a macro such as
// QP_ENTRY's definition is not a kernel).
func stripComments(src string) string {
	src = reBlockComment.ReplaceAllString(src, " ")
	src = reLineComment.ReplaceAllString(src, "")
	return rePreproc.ReplaceAllString(src, "")
}

// parseLibrary reads the kernel signatures and parameter structs of src and
// checks the conventions the host relies on: every parameter has an
// attribute; buffers are numbered 0..n-1 once each; the last buffer is a
// `constant S&` parameter struct whose layout is known.
func parseLibrary(src string) (*library, error) {
	clean := stripComments(src)
	lib := &library{kernels: map[string]*kernelSig{}, structs: map[string]*structLayout{}}
	// A struct the host cannot lay out is an error only when a kernel
	// takes it as its parameter block (helper structs may hold anything).
	bad := map[string]error{}
	for _, m := range reStruct.FindAllStringSubmatch(clean, -1) {
		if _, dup := lib.structs[m[1]]; dup {
			return nil, fmt.Errorf("metal kernels: struct %s defined twice", m[1])
		}
		if _, dup := bad[m[1]]; dup {
			return nil, fmt.Errorf("metal kernels: struct %s defined twice", m[1])
		}
		sl, err := parseStruct(m[1], m[2])
		if err != nil {
			bad[m[1]] = err
			continue
		}
		lib.structs[sl.Name] = sl
	}
	addKernel := func(sig *kernelSig) error {
		if err, ok := bad[sig.Struct]; ok {
			return err
		}
		if _, ok := lib.structs[sig.Struct]; !ok {
			return fmt.Errorf("metal kernels: kernel %s: parameter struct %s is not defined", sig.Name, sig.Struct)
		}
		if _, dup := lib.kernels[sig.Name]; dup {
			return fmt.Errorf("metal kernels: kernel %s defined twice", sig.Name)
		}
		lib.kernels[sig.Name] = sig
		return nil
	}
	type found struct {
		at  int
		sig *kernelSig
	}
	var all []found
	for _, m := range reEntry.FindAllStringSubmatchIndex(clean, -1) {
		name, st := clean[m[2]:m[3]], clean[m[4]:m[5]]
		all = append(all, found{m[0], &kernelSig{Name: name, Params: entryParams(st), Buffers: 1, Struct: st, Entry: true}})
	}
	for _, loc := range reKernel.FindAllStringSubmatchIndex(clean, -1) {
		name := clean[loc[2]:loc[3]]
		open := loc[1] - 1
		end, err := matchParen(clean, open)
		if err != nil {
			return nil, fmt.Errorf("metal kernels: kernel %s: %w", name, err)
		}
		sig, err := parseSignature(name, clean[open+1:end])
		if err != nil {
			return nil, err
		}
		all = append(all, found{loc[0], sig})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	for _, f := range all {
		if err := addKernel(f.sig); err != nil {
			return nil, err
		}
		lib.names = append(lib.names, f.sig.Name)
	}
	if len(lib.names) == 0 {
		return nil, fmt.Errorf("metal kernels: no kernel functions found")
	}
	return lib, nil
}

// matchParen returns the index of the ')' closing the '(' at open.
func matchParen(s string, open int) (int, error) {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced parentheses in the parameter list")
}

// splitTop splits s at commas outside parentheses and brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseSignature(name, params string) (*kernelSig, error) {
	sig := &kernelSig{Name: name}
	seen := map[int]bool{}
	for _, raw := range splitTop(params) {
		p := strings.Join(strings.Fields(raw), " ")
		if p == "" {
			return nil, fmt.Errorf("metal kernels: kernel %s: empty parameter", name)
		}
		m := reParam.FindStringSubmatch(p)
		if m == nil {
			return nil, fmt.Errorf("metal kernels: kernel %s: parameter %q has no [[attribute]]", name, p)
		}
		kp := kernelParam{Type: strings.TrimSpace(m[1]), Name: m[2], Attr: m[3], Index: -1}
		switch {
		case kp.Attr == "buffer":
			if m[4] == "" {
				return nil, fmt.Errorf("metal kernels: kernel %s: parameter %s: [[buffer]] without an index", name, kp.Name)
			}
			idx, err := strconv.Atoi(m[4])
			if err != nil || idx > 30 {
				return nil, fmt.Errorf("metal kernels: kernel %s: parameter %s: bad buffer index %q", name, kp.Name, m[4])
			}
			if seen[idx] {
				return nil, fmt.Errorf("metal kernels: kernel %s: buffer index %d used twice", name, idx)
			}
			seen[idx] = true
			kp.Index = idx
			sig.Buffers++
		default:
			if _, ok := positionAttrs[kp.Attr]; !ok {
				return nil, fmt.Errorf("metal kernels: kernel %s: parameter %s: unsupported attribute [[%s]]", name, kp.Name, kp.Attr)
			}
			if m[4] != "" {
				return nil, fmt.Errorf("metal kernels: kernel %s: parameter %s: [[%s]] takes no index", name, kp.Name, kp.Attr)
			}
		}
		sig.Params = append(sig.Params, kp)
	}
	for i := 0; i < sig.Buffers; i++ {
		if !seen[i] {
			return nil, fmt.Errorf("metal kernels: kernel %s: buffer indices are not 0..%d (missing %d)", name, sig.Buffers-1, i)
		}
	}
	for _, kp := range sig.Params {
		if kp.Attr != "buffer" {
			continue
		}
		m := reConstRef.FindStringSubmatch(kp.Type)
		if kp.Index == sig.Buffers-1 {
			if m == nil {
				return nil, fmt.Errorf("metal kernels: kernel %s: the last buffer (%s) must be a `constant Struct&` parameter block", name, kp.Name)
			}
			sig.Struct = m[1]
		} else if !strings.HasPrefix(kp.Type, "device ") || !strings.HasSuffix(kp.Type, "*") {
			return nil, fmt.Errorf("metal kernels: kernel %s: buffer %s must be a device pointer, is %q", name, kp.Name, kp.Type)
		}
	}
	return sig, nil
}

func parseStruct(name, body string) (*structLayout, error) {
	sl := &structLayout{Name: name, Fields: map[string]structField{}}
	off, maxAlign := 0, 1
	for _, decl := range strings.Split(body, ";") {
		decl = strings.Join(strings.Fields(decl), " ")
		if decl == "" {
			continue
		}
		if pm := rePtrField.FindStringSubmatch(decl); pm != nil {
			typ := "ptr"
			if pm[1] != "" {
				typ = "cptr"
			}
			if _, dup := sl.Fields[pm[3]]; dup {
				return nil, fmt.Errorf("metal kernels: struct %s: field %s declared twice", name, pm[3])
			}
			off = (off + 7) / 8 * 8
			sl.Fields[pm[3]] = structField{Type: typ, Offset: off, Size: 8}
			sl.Order = append(sl.Order, pm[3])
			off += 8
			maxAlign = 8
			continue
		}
		m := reField.FindStringSubmatch(decl)
		if m == nil {
			return nil, fmt.Errorf("metal kernels: struct %s: cannot parse field %q (want `type name;` with a scalar type, or `QP_GLOBAL [const] type* name;`)", name, decl)
		}
		size, ok := scalarSizes[m[1]]
		if !ok {
			return nil, fmt.Errorf("metal kernels: struct %s: field type %s is not a supported scalar", name, m[1])
		}
		for _, fn := range strings.Split(m[2], ",") {
			fn = strings.TrimSpace(fn)
			if _, dup := sl.Fields[fn]; dup {
				return nil, fmt.Errorf("metal kernels: struct %s: field %s declared twice", name, fn)
			}
			off = (off + size - 1) / size * size
			sl.Fields[fn] = structField{Type: m[1], Offset: off, Size: size}
			sl.Order = append(sl.Order, fn)
			off += size
			maxAlign = max(maxAlign, size)
		}
	}
	sl.Size = (off + maxAlign - 1) / maxAlign * maxAlign
	if sl.Size == 0 {
		return nil, fmt.Errorf("metal kernels: struct %s is empty", name)
	}
	return sl, nil
}
