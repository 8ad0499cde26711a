package expertcache

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a byte size such as "2GiB", "512MiB", "1.5G", "800MB"
// or "1048576". Binary suffixes (KiB, MiB, GiB, TiB; K, M, G, T alone are
// read as binary too, as memory sizes usually are) multiply by powers of
// 1024, decimal ones (KB, MB, GB, TB) by powers of 1000; "B" is optional.
// The result must be positive and below 2^62.
func ParseSize(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	if len(s) > 64 {
		return 0, fmt.Errorf("size %.20q...: too long", in)
	}
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') && s[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(s[:i]), strings.ToLower(strings.TrimSpace(s[i:]))
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", in, s[i:])
	}
	if num == "" || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("size %q: not a number", in)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("size %q: not a number", in)
	}
	b := v * mult
	if b < 1 || b >= 1<<62 {
		return 0, fmt.Errorf("size %q: out of range (1 byte to 4 EiB)", in)
	}
	return int64(b), nil
}

// FormatSize renders n bytes with a binary unit, e.g. "1.50 GiB".
func FormatSize(n int64) string {
	const u = 1024
	if n < u {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, name := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= u
		if f < u || name == "TiB" {
			return fmt.Sprintf("%.2f %s", f, name)
		}
	}
	return ""
}
