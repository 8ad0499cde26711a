package cuda

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Where the libraries are looked for. The driver is always libcuda.so.1
// (installed by the driver package on the loader's path; containers mount
// it under /usr/local/nvidia or /usr/lib/x86_64-linux-gnu). NVRTC belongs
// to the toolkit, which is often not on the loader's path at all: the CUDA
// 13 (and 12) toolkit directories, the pip wheels of nvidia-cuda-nvrtc, and
// $CUDA_HOME/$CUDA_PATH are tried too. QPACK_CUDA_DRIVER and QPACK_NVRTC
// name a file and take precedence.

// driverCandidates lists the names dlopen is tried with for libcuda.
func driverCandidates(getenv func(string) string) []string {
	var c []string
	if p := getenv("QPACK_CUDA_DRIVER"); p != "" {
		c = append(c, p)
	}
	return append(c, "libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
		"/usr/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1", "libcuda.so")
}

// nvrtcDirs are the directories searched for libnvrtc.so.* after the
// loader's own path.
func nvrtcDirs(getenv func(string) string) []string {
	var d []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if p := getenv(v); p != "" {
			d = append(d, filepath.Join(p, "lib64"), filepath.Join(p, "lib"))
		}
	}
	return append(d, "/usr/local/cuda/lib64", "/usr/local/cuda-13*/lib64", "/usr/local/cuda-12*/lib64",
		"/usr/local/cuda/targets/*-linux/lib", "/usr/local/cuda-1[23]*/targets/*-linux/lib",
		"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
		"/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib", "/usr/local/lib/python3*/dist-packages/nvidia/cuda_nvrtc/lib",
		"/opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib", "/opt/*/.venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib")
}

// nvrtcCandidates lists what dlopen is tried with for NVRTC: the override,
// the sonames of CUDA 13 and 12 on the loader's path, then every
// libnvrtc.so.N[.M...] found in nvrtcDirs, newest version first.
func nvrtcCandidates(getenv func(string) string, glob func(string) ([]string, error)) []string {
	var c []string
	if p := getenv("QPACK_NVRTC"); p != "" {
		c = append(c, p)
	}
	c = append(c, "libnvrtc.so.13", "libnvrtc.so.12")
	var found []string
	seen := map[string]bool{}
	for _, d := range nvrtcDirs(getenv) {
		m, _ := glob(filepath.Join(d, "libnvrtc.so.*"))
		for _, f := range m {
			if !seen[f] && nvrtcVersion(f) != nil {
				seen[f] = true
				found = append(found, f)
			}
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return versionLess(nvrtcVersion(found[j]), nvrtcVersion(found[i])) })
	return append(c, found...)
}

// nvrtcVersion parses the numeric suffix of libnvrtc.so.13.0.48 ([13 0 48]);
// nil for anything else (libnvrtc.so.13.alt, libnvrtc-builtins...).
func nvrtcVersion(path string) []int {
	rest, ok := strings.CutPrefix(filepath.Base(path), "libnvrtc.so.")
	if !ok || rest == "" {
		return nil
	}
	var v []int
	for _, p := range strings.Split(rest, ".") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil
		}
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}
