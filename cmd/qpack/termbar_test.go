package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/repack"
)

// fakeClock is a settable clock for bars.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestBar(w *bytes.Buffer, label string, total int64) (*termBar, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	b := newTermBar(w, label, total)
	b.now = clk.now
	b.start = clk.now()
	return b, clk
}

// lastLine is the line a terminal shows last: the text after the final
// carriage return, without the erase code.
func lastLine(s string) string {
	if i := strings.LastIndex(s, "\r"); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimPrefix(s, "\x1b[K")
}

func TestTermBarLine(t *testing.T) {
	var w bytes.Buffer
	b, clk := newTestBar(&w, "repacking", 100<<20)
	b.resumed(40 << 20) // from an earlier run: not in the rate
	for i := 0; i < 10; i++ {
		clk.advance(time.Second)
		b.add(2 << 20) // 2 MiB/s
	}
	got := b.line(clk.now())
	for _, want := range []string{"repacking", "60.0 MiB / 100.0 MiB", "60%", "2.0 MiB/s", "20s left"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	if strings.Count(got, "%") != 1 {
		t.Errorf("line %q has more than one percentage", got)
	}
	// The rate follows the recent window: the link slows to 1 MiB/s.
	for i := 0; i < 20; i++ {
		clk.advance(time.Second)
		b.add(1 << 20)
	}
	if got := b.line(clk.now()); !strings.Contains(got, "1.0 MiB/s") || !strings.Contains(got, "20s left") {
		t.Errorf("after slowing down: %q", got)
	}
	// Redraws are throttled; finish leaves only the summary.
	w.Reset()
	b.add(1)
	b.add(1)
	if n := strings.Count(w.String(), "\r"); n > 1 {
		t.Errorf("%d redraws within %v", n, barRedraw)
	}
	b.finish("done: 80.0 MiB")
	if got := lastLine(w.String()); got != "done: 80.0 MiB\n" {
		t.Errorf("finish left %q", got)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		45 * time.Second:                "45s",
		3*time.Minute + 5*time.Second:   "3m05s",
		2*time.Hour + 10*time.Minute:    "2h10m",
		200 * time.Hour:                 ">99h",
		1500 * time.Millisecond:         "2s",
		59*time.Minute + 59*time.Second: "59m59s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

// TestDownloadProgress: the download line shows bytes done of the total
// (resumed bytes included) and one percentage, a line per file, and a
// closing total line.
func TestDownloadProgress(t *testing.T) {
	var w bytes.Buffer
	p := newTermProgress(&w)
	p.Plan(2, 3000)
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	p.bar.now, p.bar.start = clk.now, clk.now()
	p.FileStart("a.safetensors", 2000, 500)
	clk.advance(time.Second)
	p.Add("a.safetensors", 1000)
	p.bar.draw(true)
	line := lastLine(w.String())
	if !strings.Contains(line, "1.5 KiB / 2.9 KiB") || !strings.Contains(line, "50%") || strings.Count(line, "%") != 1 || !strings.Contains(line, "a.safetensors") {
		t.Errorf("bar line %q", line)
	}
	p.Add("a.safetensors", 500)
	p.FileDone("a.safetensors", nil)
	p.FileStart("b.json", 1000, 0)
	p.Add("b.json", 10)
	p.FileDone("b.json", errors.New("hash mismatch"))
	clk.advance(time.Second)
	p.finish()
	out := w.String()
	if !strings.Contains(out, "✓ a.safetensors (2.0 KiB") || !strings.Contains(out, "✗ b.json: hash mismatch") {
		t.Errorf("file lines missing:\n%q", out)
	}
	if !strings.HasSuffix(out, "\n1 of 2 files, 1.5 KiB fetched in 2s, 755 B/s; 1 failed\n") {
		t.Errorf("no closing total line:\n%q", out)
	}
}

// TestRepackBarResume: a resumed repack's bar starts at the bytes already
// done, its rate counts only this run's bytes, and each phase closes with
// a summary line.
func TestRepackBarResume(t *testing.T) {
	var w bytes.Buffer
	b := &repackBar{w: &w}
	b.update(repack.Progress{Phase: "copy", Done: 60 << 20, Total: 100 << 20, Layer: -1})
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	b.bar.now, b.bar.start, b.bar.samples = clk.now, clk.now(), nil
	for i := 1; i <= 5; i++ {
		clk.advance(time.Second)
		b.update(repack.Progress{Phase: "copy", Done: 60<<20 + int64(i)<<20, Total: 100 << 20, Layer: 3})
	}
	b.bar.draw(true)
	line := lastLine(w.String())
	for _, want := range []string{"repacking, layer 3", "65.0 MiB / 100.0 MiB", "65%", "1.0 MiB/s", "35s left"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	b.update(repack.Progress{Phase: "finish", Done: 0, Total: 10, Layer: -1})
	if !strings.Contains(w.String(), "repacked 65.0 MiB of 100.0 MiB in 5s (1.0 MiB/s); 60.0 MiB from the earlier run\n") {
		t.Errorf("no closing line for the copy phase:\n%q", w.String())
	}
	b.finish()
	if got := lastLine(w.String()); !strings.HasPrefix(got, "hashed 0 B of 10 B") {
		t.Errorf("last line %q", got)
	}
}
