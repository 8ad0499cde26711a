// Command gentiny regenerates the committed tiny checkpoints:
//
//	go run ./internal/tinymodel/cmd/gentiny -out testdata/tiny
//
// Each variant of tinymodel.Variants() is written to <out>/<name>; a
// variant directory is emptied first. -only limits it to the named variants
// (comma separated).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/internal/tinymodel"
)

func main() {
	out := flag.String("out", "testdata/tiny", "directory that receives one sub-directory per variant")
	only := flag.String("only", "", "comma-separated variant names (default: all)")
	flag.Parse()
	if err := run(*out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "gentiny:", err)
		os.Exit(1)
	}
}

func run(out, only string) error {
	var want []string
	if only != "" {
		want = strings.Split(only, ",")
	}
	// Every variant, Qwen and Gemma 4, as a name and a generator call.
	type variant struct {
		name string
		gen  func(dir string) error
	}
	var all []variant
	for _, v := range tinymodel.Variants() {
		all = append(all, variant{v.Name, func(dir string) error { return tinymodel.Generate(dir, v.Spec) }})
	}
	for _, v := range tinymodel.Gemma4Variants() {
		all = append(all, variant{v.Name, func(dir string) error { return tinymodel.GenerateGemma4(dir, v.Spec) }})
	}
	for _, w := range want {
		if !slices.ContainsFunc(all, func(v variant) bool { return v.name == w }) {
			return fmt.Errorf("unknown variant %q", w)
		}
	}
	for _, v := range all {
		if want != nil && !slices.Contains(want, v.name) {
			continue
		}
		dir := filepath.Join(out, v.name)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := v.gen(dir); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		slog.Info("generated", "variant", v.name, "dir", dir)
	}
	return nil
}
