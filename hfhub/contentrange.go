package hfhub

import (
	"fmt"
	"strconv"
	"strings"
)

// Range is a byte range [Off, Off+Len) of a remote file.
type Range struct {
	Off int64
	Len int64
}

// End returns Off+Len.
func (r Range) End() int64 { return r.Off + r.Len }

// contentRange is a parsed "Content-Range: bytes first-last/total" header.
// Total is -1 for "*"; Unsatisfied is set for "bytes */total".
type contentRange struct {
	First, Last, Total int64
	Unsatisfied        bool
}

// parseContentRange parses a Content-Range header strictly (RFC 9110 §14.4):
// "bytes" unit, decimal digits only, first <= last < total.
func parseContentRange(s string) (contentRange, error) {
	var cr contentRange
	if len(s) > 200 {
		return cr, fmt.Errorf("Content-Range header too long")
	}
	unit, spec, ok := strings.Cut(s, " ")
	if !ok || !strings.EqualFold(unit, "bytes") {
		return cr, fmt.Errorf("Content-Range %q: want the bytes unit", s)
	}
	spec = strings.TrimSpace(spec)
	rng, total, ok := strings.Cut(spec, "/")
	if !ok {
		return cr, fmt.Errorf("Content-Range %q: no total length", s)
	}
	if total == "*" {
		cr.Total = -1
	} else {
		t, err := parseDecimal(total)
		if err != nil {
			return cr, fmt.Errorf("Content-Range %q: total: %v", s, err)
		}
		cr.Total = t
	}
	if rng == "*" {
		if cr.Total < 0 {
			return cr, fmt.Errorf("Content-Range %q: neither range nor total", s)
		}
		cr.Unsatisfied = true
		return cr, nil
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return cr, fmt.Errorf("Content-Range %q: malformed range", s)
	}
	first, err := parseDecimal(a)
	if err != nil {
		return cr, fmt.Errorf("Content-Range %q: first byte: %v", s, err)
	}
	last, err := parseDecimal(b)
	if err != nil {
		return cr, fmt.Errorf("Content-Range %q: last byte: %v", s, err)
	}
	if first > last {
		return cr, fmt.Errorf("Content-Range %q: first byte after last", s)
	}
	if cr.Total >= 0 && last >= cr.Total {
		return cr, fmt.Errorf("Content-Range %q: last byte beyond the total", s)
	}
	cr.First, cr.Last = first, last
	return cr, nil
}

// parseDecimal accepts 1-18 ASCII digits (no sign, no spaces), so the value
// and any later +1 cannot overflow an int64.
func parseDecimal(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, fmt.Errorf("%q is not a decimal of 1-18 digits", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal", s)
		}
	}
	return strconv.ParseInt(s, 10, 64)
}
