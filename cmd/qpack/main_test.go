package main

import (
	"strings"
	"testing"
)

func TestInterspersedArgs(t *testing.T) {
	app := newApp()
	for _, tc := range []struct{ in, want string }{
		{"qpack inspect X --json", "qpack inspect --json X"},
		{"qpack inspect --json X", "qpack inspect --json X"},
		{"qpack --verbose inspect X --json", "qpack --verbose inspect --json X"},
		{"qpack inspect X -- --json", "qpack inspect X -- --json"},
		{"qpack inspect X --nosuch", "qpack inspect X --nosuch"},
		{"qpack quickstart --workdir W --json", "qpack quickstart --workdir W --json"},
		{"qpack quickstart --json --workdir=W", "qpack quickstart --json --workdir=W"},
		{"qpack nosuchcommand a --b", "qpack nosuchcommand a --b"},
	} {
		got := strings.Join(interspersedArgs(app, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
	// Value flags keep their value when moved.
	got := strings.Join(interspersedArgs(app, strings.Fields("qpack quickstart extra --workdir W")), " ")
	if got != "qpack quickstart --workdir W extra" {
		t.Errorf("value flag: got %q", got)
	}
}
