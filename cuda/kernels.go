package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/qpack-go/qpack/internal/gpukernels"
)

//go:embed kernels/*.h kernels/*.cu
var kernelFS embed.FS

// Source returns the kernel source NVRTC compiles: the CUDA prelude
// (kernels/00_prelude_cuda.h), the shared bodies of the whole-layer kernels
// (gpukernels.Bodies), then every CUDA-only kernels/*.cu in name order.
func Source() string {
	names, err := fs.Glob(kernelFS, "kernels/*")
	if err != nil {
		panic(err) // the pattern is constant
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, err := kernelFS.ReadFile(n)
		if err != nil {
			panic(err) // embedded
		}
		b.WriteString("// ---- " + n + "\n")
		b.Write(data)
		b.WriteString("\n")
		if strings.HasSuffix(n, ".h") {
			b.WriteString(gpukernels.Bodies())
		}
	}
	return b.String()
}

// sourceWithDefines is Source after a #define line for each NAME=VALUE (or
// NAME) of defs, separated by spaces or commas: QPACK_CUDA_DEFINES, the
// kernels' A/B switches for benchmarks (QP_GEMV_STAGE=0,
// QP_GEMV_MIN_GROUPS=3). It returns the defines as one line ("" for
// none); a name that is not a C identifier, or a value with other than
// letters, digits, '_', '.', '-', is refused.
func sourceWithDefines(defs string) (string, string, error) {
	var lines, names []string
	for _, d := range strings.FieldsFunc(defs, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
		name, value, _ := strings.Cut(d, "=")
		if !defineToken(name, false) || !defineToken(value, true) {
			return "", "", fmt.Errorf("cuda: QPACK_CUDA_DEFINES: %q is not NAME or NAME=VALUE", d)
		}
		lines = append(lines, "#define "+name+" "+value+"\n")
		names = append(names, d)
	}
	return strings.Join(lines, "") + Source(), strings.Join(names, " "), nil
}

func defineToken(s string, value bool) bool {
	if s == "" {
		return value
	}
	for i, r := range s {
		ok := r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9'
		if value {
			ok = ok || '0' <= r && r <= '9' || r == '.' || r == '-'
		}
		if !ok {
			return false
		}
	}
	return true
}

// Kernel names the host looks up after compiling Source.
var kernelNames = []string{"gemv_q4", "gemv_q8", "gemv_qn", "gemv_dense", "gemv_q4_set", "gemv_q8_set", "gemv_q4_set_norm", "gemv_q8_set_norm", "gemv_q4_set_gnorm", "gemv_q8_set_gnorm",
	"gemv_q4_set_sigmul", "gemv_q8_set_sigmul", "rms_norm", "swiglu",
	// the whole-layer kernels (internal/gpukernels, launched by layer_kernels.go)
	"rms_norm_rows", "add_rms_norm_rows", "rope", "rms_norm_rope", "attention", "attention_tile", "attention_gqa", "attention_merge", "deltanet_conv", "deltanet_qknorm", "deltanet_rec", "deltanet_rec_reg",
	"deltanet_rec_cols", "deltanet_out", "scale", "softcap", "glu", "add", "sigmoid_mul", "add_gated", "combine",
	"gather", "gather_rows", "scatter_rows", "scatter_rows2", "route_topk", "select_chunk", "select_merge", "select_list",
	// routed experts on the device (kernels/22_moe.cu, launched by layer_moe.go)
	"moe_gateup_q4", "moe_gateup_q8", "moe_gateup_qn", "moe_gateup_dense",
	"moe_down_q4", "moe_down_q8", "moe_down_qn", "moe_down_dense",
	// the selection in one launch (kernels/27_select.cu, select_top.go)
	"select_top",
	// the batched products (kernels/25_gemm.cu, launched by gemm.go)
	"gemm_q4", "gemm_q8", "gemm_bf16", "gemm_f16", "gemm_f32", "gemm_q4_h", "gemm_q8_h", "gemm_bf16_h", "gemm_base", "gemm_fma",
	// a chunk's routed experts as grouped products (launched by layer_group.go)
	"gemm_group_q4", "gemm_group_q8"}

// Geometry shared with the kernels (kernels/10_common.cu).
const (
	tgThreads = 256 // QP_TG
	simdWidth = 32  // QP_SIMD
	rowsPerTG = tgThreads / simdWidth
	qRows     = 4     // QP_QROWS: rows per simdgroup of gemv_q4 and gemv_q8
	maxGridY  = 65535 // CUDA's limit on gridDim.y
)
