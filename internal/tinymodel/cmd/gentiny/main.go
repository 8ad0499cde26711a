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
	known := map[string]bool{}
	for _, v := range tinymodel.Variants() {
		known[v.Name] = true
	}
	for _, w := range want {
		if !known[w] {
			return fmt.Errorf("unknown variant %q", w)
		}
	}
	for _, v := range tinymodel.Variants() {
		if want != nil && !slices.Contains(want, v.Name) {
			continue
		}
		dir := filepath.Join(out, v.Name)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := tinymodel.Generate(dir, v.Spec); err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		slog.Info("generated", "variant", v.Name, "dir", dir)
	}
	return nil
}
