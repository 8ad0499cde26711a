package gpukernels

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.qk
var bodies embed.FS

// Bodies returns every kernel body file (*.qk) in name order, each after a
// "// ---- gpukernels/NAME" line: the text a prelude is followed by.
func Bodies() string {
	names, err := fs.Glob(bodies, "*.qk")
	if err != nil {
		panic(err) // the pattern is constant
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, err := bodies.ReadFile(n)
		if err != nil {
			panic(err) // embedded
		}
		b.WriteString("// ---- gpukernels/" + n + "\n")
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}

// Kernels lists the names of the kernels the bodies define (QP_ENTRY), in
// source order.
func Kernels() []string {
	var ks []string
	src := Bodies()
	for {
		i := strings.Index(src, "QP_ENTRY(")
		if i < 0 {
			return ks
		}
		src = src[i+len("QP_ENTRY("):]
		if j := strings.IndexAny(src, ",)"); j > 0 {
			ks = append(ks, strings.TrimSpace(src[:j]))
		}
	}
}
