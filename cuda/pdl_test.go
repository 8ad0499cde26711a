package cuda

import (
	"regexp"
	"strings"
	"testing"
	"unsafe"
)

// The Go structs must have cuda.h's layouts: cuLaunchKernelEx reads them.
func TestLaunchConfigLayout(t *testing.T) {
	var c launchConfig
	var a launchAttr
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUlaunchConfig)", unsafe.Sizeof(c), 56},
		{"CUlaunchConfig.blockDimX", unsafe.Offsetof(c.block), 12},
		{"CUlaunchConfig.sharedMemBytes", unsafe.Offsetof(c.sharedMem), 24},
		{"CUlaunchConfig.hStream", unsafe.Offsetof(c.stream), 32},
		{"CUlaunchConfig.attrs", unsafe.Offsetof(c.attrs), 40},
		{"CUlaunchConfig.numAttrs", unsafe.Offsetof(c.numAttrs), 48},
		{"sizeof(CUlaunchAttribute)", unsafe.Sizeof(a), 72},
		{"CUlaunchAttribute.value", unsafe.Offsetof(a.value), 8},
	} {
		if f.got != f.want {
			t.Errorf("%s = %d, want %d", f.name, f.got, f.want)
		}
	}
}

func TestPDLWanted(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == pdlEnv {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		major  int
		have   bool
		env    string
		wanted bool
	}{
		{9, true, "", true}, {10, true, "1", true}, {9, true, "0", false},
		{8, true, "", false}, {9, false, "", false},
	} {
		if got := pdlWanted(c.major, c.have, env(c.env)); got != c.wanted {
			t.Errorf("pdlWanted(%d, %v, %s=%q) = %v", c.major, c.have, pdlEnv, c.env, got)
		}
	}
}

// Under a dependent launch a kernel's groups may run before the kernel
// before it has finished: every kernel must call qp_grid_begin() before it
// touches memory a kernel writes or reads. The shared bodies get it from
// QP_ENTRY's wrapper; a QP_KERNEL calls it first, or delegates to a helper
// whose only work before it is prefetching weights, or calls a prefetch
// helper or several (qp_moe_prefetch_*: prefetches only, and reads of the
// expert table, of the next ranges (weights' addresses, written by copies)
// and of sel, the choice of two kernels back: kernels/22_moe.cu says why
// that is complete) and then it.
func TestKernelsWaitForTheKernelBefore(t *testing.T) {
	src := Source()
	entry := src[strings.Index(src, "#define QP_ENTRY(name, P)"):]
	entry = entry[:strings.Index(entry, "QP_DEVICE void name##_body(const P& p)\n")]
	if !regexp.MustCompile(`name\(const P p\) \{\s*\\\s*qp_grid_begin\(\);\s*\\\s*name##_body\(p\);`).MatchString(entry) {
		t.Errorf("QP_ENTRY's wrapper does not call qp_grid_begin() before the body:\n%s", entry)
	}
	kernels := regexp.MustCompile(`QP_KERNEL(?:_BOUNDS\([A-Z_0-9]+\))? (\w+)\(\w+ p\) \{\s*`).FindAllStringSubmatchIndex(src, -1)
	if len(kernels) < 20 {
		t.Fatalf("found %d QP_KERNELs", len(kernels))
	}
	helpers := map[string]bool{}
	for _, k := range kernels {
		name, body := src[k[2]:k[3]], src[k[1]:]
		if strings.HasPrefix(body, "qp_grid_begin();") {
			continue
		}
		if m := regexp.MustCompile(`^((?:qp_moe_prefetch_\w+(?:<\w+>)?\(p(?:, [\w()]+)?\);\s*)+)qp_grid_begin\(\);`).FindStringSubmatch(body); m != nil {
			for _, call := range regexp.MustCompile(`qp_moe_prefetch_\w+`).FindAllString(m[1], -1) {
				h, ok := deviceFunc(src, call)
				if !ok {
					t.Errorf("prefetch helper %s not found", call)
					continue
				}
				for _, touch := range []string{"qp_load", "qp_rows", "p.x", "p.y", "p.wts", "p.gate", "p.scale", "p.fault", "*p.", "y[", "x["} {
					if strings.Contains(h, touch) {
						t.Errorf("%s reads or writes memory (%s) before qp_grid_begin()", call, touch)
					}
				}
			}
			continue
		}
		m := regexp.MustCompile(`^(qp_\w+)<[\w, ]+>\([\w.&, ]*\); \}`).FindStringSubmatch(body)
		if m == nil {
			t.Errorf("kernel %s does not start with qp_grid_begin()", name)
			continue
		}
		helpers[m[1]] = true
	}
	for h := range helpers {
		body, ok := deviceFunc(src, h)
		if !ok {
			t.Errorf("helper %s not found", h)
			continue
		}
		before, _, ok := strings.Cut(body, "qp_grid_begin();")
		if !ok {
			t.Errorf("%s never calls qp_grid_begin()", h)
			continue
		}
		if !regexp.MustCompile(`qp_prefetch_rows<BITS>\([^;]*\);\s*$`).MatchString(before) {
			t.Errorf("%s: qp_grid_begin() does not directly follow the weights' prefetch", h)
		}
		for _, touch := range []string{"qp_load", "qp_rows_q", "p.x", "p.y", "y[", "x[", "= *"} {
			if strings.Contains(before, touch) {
				t.Errorf("%s reads or writes memory (%s) before qp_grid_begin()", h, touch)
			}
		}
	}
}

// deviceFunc returns the source of the QP_DEVICE void function name in src,
// from its declaration to its closing brace (a line of its own).
func deviceFunc(src, name string) (string, bool) {
	i := strings.Index(src, "QP_DEVICE void "+name+"(")
	if i < 0 {
		return "", false
	}
	body := src[i:]
	if j := strings.Index(body, "\n}\n"); j >= 0 {
		body = body[:j]
	}
	return body, true
}
