package metal

import (
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/gpukernels"
)

func TestEmbeddedLibrary(t *testing.T) {
	lib, err := kernelLibrary()
	if err != nil {
		t.Fatal(err)
	}
	// The shared bodies first (after the common definitions and the
	// prelude), then the Metal-only kernels.
	want := append(gpukernels.Kernels(), "gemv_q4", "gemv_q8", "gemv_qn", "gemv_dense", "rms_norm", "gated_rms_norm", "l2_norm",
		"rope_neox", "attn_decode", "conv1d_step", "gdn_gates", "gated_delta_step",
		"swiglu", "sigmoid_mul_rows", "residual_add", "scale_add", "copy_f32")
	if strings.Join(lib.names, " ") != strings.Join(want, " ") {
		t.Fatalf("kernels %v, want %v", lib.names, want)
	}
	if !strings.HasPrefix(Source(), "// ---- kernels/00_common.metal ----\n") {
		t.Error("the common definitions do not come first")
	}
	// QGemv laid out by hand: five ulongs, six uints.
	g := lib.structs["QGemv"]
	for name, off := range map[string]int{"w_off": 0, "y_off": 32, "rows": 40, "cols": 44, "bits": 56, "pad": 60} {
		if f := g.Fields[name]; f.Offset != off {
			t.Errorf("QGemv.%s at %d, want %d", name, f.Offset, off)
		}
	}
	if g.Size != 64 {
		t.Errorf("QGemv is %d bytes, want 64", g.Size)
	}
	if a := lib.structs["Attn"]; a.Size != 88 || a.Fields["scale"].Offset != 80 {
		t.Errorf("Attn: size %d, scale at %d; want 88 and 80", a.Size, a.Fields["scale"].Offset)
	}
	for name, sig := range lib.kernels {
		if lib.structs[sig.Struct].Size%8 != 0 {
			t.Errorf("kernel %s: struct %s is %d bytes, not a multiple of 8", name, sig.Struct, lib.structs[sig.Struct].Size)
		}
	}
	// A kernel of the shared dialect: pointers first, the entry's ids.
	c := lib.structs["CopyF32"]
	if c.Size != 24 || c.Fields["dst"].Type != "ptr" || c.Fields["src"].Type != "cptr" || c.Fields["n"].Offset != 16 {
		t.Errorf("CopyF32 layout %+v", c)
	}
	if cp := lib.kernels["copy_f32"]; !cp.Entry || cp.Buffers != 1 || cp.Struct != "CopyF32" || len(cp.Params) != 5 {
		t.Errorf("copy_f32 signature: %+v", cp)
	}
	q4 := lib.kernels["gemv_q4"]
	if q4.Buffers != 6 || q4.Struct != "QGemv" || q4.Params[4].Writable() == false || q4.Params[0].Writable() || q4.Params[5].Writable() {
		t.Errorf("gemv_q4 signature: %+v", q4)
	}
}

func TestParseLibraryErrors(t *testing.T) {
	const st = "struct P { ulong a; uint n; };\n"
	for _, c := range []struct{ src, want string }{
		{"", "no kernel functions"},
		{st + "kernel void k(device float* x, constant P& p [[buffer(1)]]) {}", "has no [[attribute]]"},
		{st + "kernel void k(device float* x [[buffer(0)]], constant P& p [[buffer(0)]]) {}", "used twice"},
		{st + "kernel void k(device float* x [[buffer(0)]], constant P& p [[buffer(2)]]) {}", "missing 1"},
		{st + "kernel void k(device float* x [[buffer(0)]], device float* p [[buffer(1)]]) {}", "constant Struct&"},
		{st + "kernel void k(device float* x [[buffer(0)]], constant Q& p [[buffer(1)]]) {}", "struct Q is not defined"},
		{st + "kernel void k(thread float* x [[buffer(0)]], constant P& p [[buffer(1)]]) {}", "device pointer"},
		{st + "kernel void k(constant P& p [[buffer(0)]], uint i [[thread_id_whatever]]) {}", "unsupported attribute"},
		{st + "kernel void k(constant P& p [[buffer(0)]], uint i [[thread_position_in_grid(2)]]) {}", "takes no index"},
		{"struct P { float4 v; };\nkernel void k(constant P& p [[buffer(0)]]) {}", "not a supported scalar"},
		{"struct P { uint a; uint a; };\nkernel void k(constant P& p [[buffer(0)]]) {}", "declared twice"},
		{st + st + "kernel void k(constant P& p [[buffer(0)]]) {}", "defined twice"},
		{st + "kernel void k(constant P& p [[buffer(0)]]) {}\nkernel void k(constant P& p [[buffer(0)]]) {}", "kernel k defined twice"},
		{st + "kernel void k(constant P& p [[buffer(0)]] {}", "unbalanced"},
		{"struct P { QP_GLOBAL float** x; };\nQP_ENTRY(k, P) {}", "cannot parse field"},
		{st + "QP_ENTRY(k, Q) {}", "struct Q is not defined"},
		{st + "QP_ENTRY(k, P) {}\nkernel void k(constant P& p [[buffer(0)]]) {}", "kernel k defined twice"},
	} {
		_, err := parseLibrary(c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.src, err, c.want)
		}
	}
	// Comments are ignored, layout follows natural alignment.
	lib, err := parseLibrary("// kernel void nope(\n/* kernel void nope2( */\nstruct P { uint a; ulong b; float c, d; ushort e; };\n" +
		"kernel void k(device const uchar* x [[buffer(0)]], constant P& p [[buffer(1)]], uint3 g [[thread_position_in_grid]]) {}")
	if err != nil {
		t.Fatal(err)
	}
	p := lib.structs["P"]
	if p.Fields["b"].Offset != 8 || p.Fields["d"].Offset != 20 || p.Fields["e"].Offset != 24 || p.Size != 32 {
		t.Errorf("layout %+v", p)
	}
	if len(lib.names) != 1 || lib.kernels["k"].Params[2].Attr != "thread_position_in_grid" {
		t.Errorf("kernels %+v", lib.kernels)
	}
	// The dialect: a macro defining a kernel is not one; pointer fields are
	// 8 bytes; an unparsable helper struct is fine; kernels in source order.
	lib, err = parseLibrary("#define QP_ENTRY(name, P) \\\n kernel void name(constant P& p [[buffer(0)]])\n" +
		"struct H { float4 v; };\nstruct P { QP_GLOBAL const int* ix; QP_GLOBAL float* y; uint n; };\n" +
		"QP_ENTRY(b, P) {}\nkernel void a(constant P& p [[buffer(0)]]) {}\nQP_ENTRY(c, P) {}")
	if err != nil {
		t.Fatal(err)
	}
	if p := lib.structs["P"]; p.Size != 24 || p.Fields["ix"].Type != "cptr" || p.Fields["y"].Offset != 8 || p.Fields["n"].Offset != 16 {
		t.Errorf("pointer layout %+v", p)
	}
	if strings.Join(lib.names, " ") != "b a c" || !lib.kernels["b"].Entry || lib.kernels["a"].Entry {
		t.Errorf("kernels %v", lib.names)
	}
}

// TestPreludeEntryMatches: QP_ENTRY in the prelude declares exactly the
// parameters the host assumes (entryParams), which the shim's glue passes.
func TestPreludeEntryMatches(t *testing.T) {
	src, err := kernelFS.ReadFile("kernels/01_prelude.metal")
	if err != nil {
		t.Fatal(err)
	}
	def := string(src)
	i := strings.Index(def, "#define QP_ENTRY(name, Params)")
	if i < 0 {
		t.Fatal("no QP_ENTRY definition")
	}
	def = def[i:]
	def = def[:strings.Index(def, ")\n\n")+1]
	def = strings.Join(strings.Fields(strings.ReplaceAll(def, "\\\n", " ")), " ")
	var want []string
	for _, p := range entryParams("Params") {
		if p.Attr == "buffer" {
			want = append(want, p.Type+" "+p.Name+" [[buffer(0)]]")
		} else {
			want = append(want, p.Type+" "+p.Name+" [["+p.Attr+"]]")
		}
	}
	if w := "#define QP_ENTRY(name, Params) kernel void name(" + strings.Join(want, ", ") + ")"; def != w {
		t.Errorf("prelude declares\n%s\nthe host assumes\n%s", def, w)
	}
}

// FuzzParseLibrary: the parser never panics, and what it accepts is
// consistent.
func FuzzParseLibrary(f *testing.F) {
	f.Add("struct P { ulong a; uint n; };\nkernel void k(device float* x [[buffer(0)]], constant P& p [[buffer(1)]], uint i [[thread_index_in_simdgroup]]) {}")
	f.Add(Source())
	f.Fuzz(func(t *testing.T, src string) {
		lib, err := parseLibrary(src)
		if err != nil {
			return
		}
		for _, name := range lib.names {
			sig := lib.kernels[name]
			st := lib.structs[sig.Struct]
			if sig.Buffers < 1 || st == nil || st.Size < 1 {
				t.Fatalf("kernel %s accepted with %d buffers, struct %q", name, sig.Buffers, sig.Struct)
			}
			for _, fl := range st.Fields {
				if fl.Offset < 0 || fl.Offset+fl.Size > st.Size || fl.Offset%fl.Size != 0 {
					t.Fatalf("struct %s field at %d size %d in %d bytes", st.Name, fl.Offset, fl.Size, st.Size)
				}
			}
		}
	})
}
