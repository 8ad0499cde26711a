package safetensors

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// IndexFile is the name of the index of a sharded checkpoint.
const IndexFile = "model.safetensors.index.json"

// MaxIndexLen is the largest index JSON this package parses (64 MiB).
const MaxIndexLen = 64 << 20

// maxJSONDepth bounds the nesting of free-form JSON values (index metadata).
const maxJSONDepth = 64

// Index is a parsed model.safetensors.index.json.
type Index struct {
	// TotalSize is metadata.total_size: the sum of the tensors' byte sizes
	// as the writer computed it; -1 if the index has none.
	TotalSize int64
	// Metadata is the "metadata" object as decoded JSON (map[string]any,
	// []any, string, bool, nil, and json.Number for numbers so that values
	// keep their exact spelling); nil if absent.
	Metadata map[string]any
	// WeightMap maps each tensor name to the shard file holding it.
	WeightMap map[string]string
}

// ParseIndex parses and validates an index file's contents. file names it in
// error messages. The JSON must be one object with no duplicate keys at any
// level; "weight_map" is required, non-empty, and maps tensor names to plain
// relative file names; "metadata" is optional, and its "total_size", if
// present, a non-negative integer. Other top-level keys are ignored.
func ParseIndex(data []byte, file string) (*Index, error) {
	if len(data) > MaxIndexLen {
		return nil, formatErr(file, "", fmt.Sprintf("index is %d bytes, over the limit of %d", len(data), MaxIndexLen))
	}
	if !utf8.Valid(data) {
		return nil, formatErr(file, "", "index is not valid UTF-8")
	}
	sc := newScanner(data, file)
	sc.ws()
	if sc.peek() != '{' {
		return nil, sc.wrongType("", "index", "a JSON object")
	}
	ix := &Index{TotalSize: -1}
	seen := make(map[string]bool)
	err := sc.object("", "index", false, func(key string) error {
		if seen[key] {
			return formatErr(file, "", fmt.Sprintf("duplicate top-level key %s", quoteTrunc(key)))
		}
		seen[key] = true
		switch key {
		case "weight_map":
			wm, err := sc.stringMap("weight_map", false)
			ix.WeightMap = wm
			return err
		case "metadata":
			if sc.peek() != '{' && sc.peek() != 'n' {
				return sc.wrongType("", "metadata", "an object")
			}
			v, err := sc.value("metadata", 0)
			if m, ok := v.(map[string]any); ok {
				ix.Metadata = m
			}
			return err
		default:
			_, err := sc.value(key, 0)
			return err
		}
	})
	if err != nil {
		return nil, err
	}
	if err := sc.end("index"); err != nil {
		return nil, err
	}
	if ix.WeightMap == nil {
		return nil, formatErr(file, "", "no weight_map")
	}
	if len(ix.WeightMap) == 0 {
		return nil, formatErr(file, "", "weight_map is empty")
	}
	for name, shard := range ix.WeightMap {
		if name == "" {
			return nil, formatErr(file, "", `weight_map has an empty tensor name ""`)
		}
		if name == metadataKey {
			return nil, formatErr(file, name, "reserved name in weight_map")
		}
		if err := checkShardName(shard); err != nil {
			return nil, formatErr(file, name, "weight_map: "+err.Error())
		}
	}
	if ts, ok := ix.Metadata["total_size"]; ok {
		n, err := totalSize(ts)
		if err != nil {
			return nil, formatErr(file, "", "metadata.total_size: "+err.Error())
		}
		ix.TotalSize = n
	}
	return ix, nil
}

// totalSize accepts an integer literal, or a float literal with an integral
// value (some writers emit "1234.0").
func totalSize(v any) (int64, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("is %s, want a non-negative integer", anyKind(v))
	}
	if n, err := parseNonNegInt(string(num)); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f >= 1<<53 {
		return 0, fmt.Errorf("%s is not a non-negative integer", truncate(string(num)))
	}
	return int64(f), nil
}

// checkShardName accepts only a plain file name in the same directory.
func checkShardName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty shard file name")
	case s == "." || s == "..":
		return fmt.Errorf("shard file name %s is not a file", quoteTrunc(s))
	case strings.ContainsAny(s, `/\:`):
		return fmt.Errorf("shard file name %s is not a plain relative file name", quoteTrunc(s))
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("shard file name %s contains a control character", quoteTrunc(s))
		}
	}
	return nil
}

// Shards returns the shard file names of the weight map, sorted, each once.
func (ix *Index) Shards() []string {
	set := make(map[string]struct{})
	for _, s := range ix.WeightMap {
		set[s] = struct{}{}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func anyKind(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	case json.Number:
		return "a number (" + truncate(string(x)) + ")"
	}
	return fmt.Sprintf("%T", v)
}
