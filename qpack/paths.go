package qpack

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Fixed names inside a container (slash-separated, relative to its root).
const (
	ManifestName = "manifest.json"
	DenseName    = "model.safetensors"
	ExpertsDir   = "packed_experts"
	LayoutName   = "packed_experts/layout.json"
)

const (
	maxPathLen      = 1024
	maxComponentLen = 255
	maxPathDepth    = 16
)

// LayerFile returns the container-relative path of layer l's expert file,
// "packed_experts/layer_%02d.bin" (layer_00.bin ... layer_99.bin, then
// layer_100.bin).
func LayerFile(l int) string {
	return fmt.Sprintf("%s/layer_%02d.bin", ExpertsDir, l)
}

// parseLayerFile reports the layer number of a name LayerFile produces.
func parseLayerFile(p string) (int, bool) {
	rest, ok := strings.CutPrefix(p, ExpertsDir+"/layer_")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, ".bin")
	if !ok || len(digits) < 2 || len(digits) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if LayerFile(n) != p { // refuses "layer_007.bin" and the like
		return 0, false
	}
	return n, true
}

// CheckPath reports whether p may name a file inside a container: relative,
// slash-separated, already clean, with no "." or ".." component, no
// backslash, colon, control character or invalid UTF-8, no component that
// starts with "." (those are working files, never part of a container), and
// within length limits.
func CheckPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case len(p) > maxPathLen:
		return fmt.Errorf("path longer than %d bytes", maxPathLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not valid UTF-8", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	case strings.ContainsRune(p, '\\'):
		return fmt.Errorf("path %q contains a backslash", p)
	case strings.ContainsRune(p, ':'):
		return fmt.Errorf("path %q contains a colon", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("path %q contains a control character", p)
		}
	}
	parts := strings.Split(p, "/")
	if len(parts) > maxPathDepth {
		return fmt.Errorf("path %q is nested deeper than %d levels", p, maxPathDepth)
	}
	for _, c := range parts {
		switch {
		case c == "..":
			return fmt.Errorf("path %q contains \"..\"", p)
		case c == "." || c == "":
			return fmt.Errorf("path %q is not clean (empty or \".\" component)", p)
		case strings.HasPrefix(c, "."):
			return fmt.Errorf("path %q has a component starting with \".\" (reserved for working files)", p)
		case len(c) > maxComponentLen:
			return fmt.Errorf("path %q has a component longer than %d bytes", p, maxComponentLen)
		}
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %q is not clean", p)
	}
	return nil
}

// foldKey maps names that a case-insensitive or normalizing file system
// (APFS, HFS+, NTFS) would treat as one file to the same key.
func foldKey(p string) string {
	return cases.Fold().String(norm.NFC.String(p)) // a Caser is not safe to share
}
