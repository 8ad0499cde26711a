package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// termBar draws one progress line on a terminal (the callers check that
// stderr is one): a label, bytes done of the total, one percentage, the
// rate and the time left. Bytes that were already in place when the bar
// started (resumed from an earlier run) count as done but not in the rate.
type termBar struct {
	w        io.Writer
	mu       sync.Mutex
	label    string
	done     int64
	total    int64
	base     int64 // bytes done before this run's transfer; not part of the rate
	start    time.Time
	samples  []barSample // recent (time, done), for the rate
	lastDraw time.Time
	drawn    bool
	now      func() time.Time
}

type barSample struct {
	t    time.Time
	done int64
}

const (
	barRedraw     = 150 * time.Millisecond // at most this often
	barRateWindow = 10 * time.Second       // the rate is measured over this span
)

func newTermBar(w io.Writer, label string, total int64) *termBar {
	b := &termBar{w: w, label: label, total: total, now: time.Now}
	b.start = b.now()
	return b
}

// setLabel changes the label (drawn with the next update).
func (b *termBar) setLabel(s string) {
	b.mu.Lock()
	b.label = s
	b.mu.Unlock()
}

// resumed counts n bytes as done without counting them in the rate.
func (b *termBar) resumed(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	b.base += n
	b.samples = nil
	b.draw(false)
}

// set makes done the bytes done so far.
func (b *termBar) set(done int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = done
	b.draw(false)
}

// add counts n more bytes done.
func (b *termBar) add(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	b.draw(false)
}

// clear erases the line, so that a message can be printed in its place
// (the next update draws it again).
func (b *termBar) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.drawn = false
	}
}

// finish erases the line and prints summary (if not empty) as the last
// line.
func (b *termBar) finish(summary string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.drawn = false
	}
	if summary != "" {
		fmt.Fprintln(b.w, summary)
	}
}

// elapsed is the time since the bar started.
func (b *termBar) elapsed() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now().Sub(b.start)
}

func (b *termBar) draw(force bool) {
	now := b.now()
	b.samples = append(b.samples, barSample{now, b.done})
	for len(b.samples) > 2 && now.Sub(b.samples[1].t) > barRateWindow {
		b.samples = b.samples[1:]
	}
	if !force && b.drawn && now.Sub(b.lastDraw) < barRedraw {
		return
	}
	b.lastDraw = now
	fmt.Fprint(b.w, "\r\x1b[K"+b.line(now))
	b.drawn = true
}

// rate is the bytes per second over the recent window (since the start
// while the window is short), excluding resumed bytes.
func (b *termBar) rate(now time.Time) float64 {
	if len(b.samples) >= 2 {
		first := b.samples[0]
		if dt := now.Sub(first.t).Seconds(); dt >= 1 {
			return float64(b.done-first.done) / dt
		}
	}
	if dt := now.Sub(b.start).Seconds(); dt > 0 {
		return float64(b.done-b.base) / dt
	}
	return 0
}

// line is the progress line without the terminal control codes.
func (b *termBar) line(now time.Time) string {
	var s strings.Builder
	if b.label != "" {
		s.WriteString(b.label)
		s.WriteString("  ")
	}
	done, total := b.done, b.total
	if total > 0 && done > total {
		done = total
	}
	if total > 0 {
		fmt.Fprintf(&s, "%s / %s  %3.0f%%", sizeIEC(done), sizeIEC(total), 100*float64(done)/float64(total))
	} else {
		s.WriteString(sizeIEC(done))
	}
	r := b.rate(now)
	fmt.Fprintf(&s, "  %s/s", sizeIEC(int64(r)))
	if total > 0 {
		switch left := total - done; {
		case left <= 0:
		case r > 0:
			fmt.Fprintf(&s, "  %s left", shortDuration(time.Duration(float64(left)/r*float64(time.Second))))
		default:
			s.WriteString("  -- left")
		}
	}
	return s.String()
}

// shortDuration writes d as "45s", "3m05s" or "2h10m".
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 100*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return ">99h"
	}
}
