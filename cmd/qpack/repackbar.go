package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/qpack-go/qpack/repack"
)

// repackBar shows a repack on a terminal: one progress line per phase
// (bytes done of the total, percentage, rate, time left, the layer being
// written), moving with every read; a line closing each phase.
type repackBar struct {
	w     io.Writer
	mu    sync.Mutex
	phase string
	layer int
	bar   *termBar
	first int64 // Done at the phase's first report: resumed bytes
}

var repackPhaseNames = map[string]string{
	"check":    "checking the partial repack",
	"copy":     "repacking",
	"finish":   "hashing the container",
	"download": "downloading",
}

var repackPhaseDone = map[string]string{
	"check":    "checked",
	"copy":     "repacked",
	"finish":   "hashed",
	"download": "downloaded",
}

func (b *repackBar) update(p repack.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Phase != b.phase || b.bar == nil {
		b.closePhase()
		b.phase, b.layer, b.first = p.Phase, -2, p.Done
		b.bar = newTermBar(b.w, repackPhaseNames[p.Phase], p.Total)
		if p.Done > 0 {
			// Bytes an earlier run completed: done, but not in the rate.
			b.bar.resumed(p.Done)
		}
	}
	if p.Layer >= 0 && p.Layer != b.layer {
		b.layer = p.Layer
		b.bar.setLabel(fmt.Sprintf("%s, layer %d", repackPhaseNames[p.Phase], p.Layer))
	}
	b.bar.set(p.Done)
}

// closePhase replaces the current phase's line with its summary.
func (b *repackBar) closePhase() {
	if b.bar == nil {
		return
	}
	b.bar.mu.Lock()
	done, total := b.bar.done, b.bar.total
	b.bar.mu.Unlock()
	el := b.bar.elapsed()
	msg := fmt.Sprintf("%s %s of %s in %s", repackPhaseDone[b.phase], sizeIEC(done), sizeIEC(total), shortDuration(el))
	if n := done - b.first; n > 0 && el.Seconds() > 0 {
		msg += fmt.Sprintf(" (%s/s)", sizeIEC(int64(float64(n)/el.Seconds())))
	}
	if b.first > 0 {
		msg += fmt.Sprintf("; %s from the earlier run", sizeIEC(b.first))
	}
	b.bar.finish(msg)
	b.bar = nil
}

func (b *repackBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closePhase()
}
