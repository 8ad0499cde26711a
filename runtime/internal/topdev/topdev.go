// Package topdev is a test double for a device that selects the top of a
// logits vector itself (nn.TopSelector, as a GPU backend does): the host
// device plus SelectTop through nn.SelectTopRef, counting its calls and
// recording where the logits are read to, and a backend that lends it as
// the model's layer device (nn.Layered). It lets the CPU tests run the
// decode path a GPU takes.
package topdev

import (
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Device is nn.HostDevice with SelectTop. Not safe for concurrent use.
type Device struct {
	nn.HostDevice

	// Vocab is the length of a logits vector: Read records where each
	// read of that many floats goes (Reads).
	Vocab int
	// Decline, if set, makes call number n (from 1) decline when it
	// reports true (as a device does whose selection would not fit).
	Decline func(n int) bool
	// Limit is SelectTopRef's: more ids at least the k-th largest than
	// that, and SelectTop declines (0: no limit).
	Limit int
	// Err, if set, is SelectTop's error.
	Err error
	// BadN, if set, is written as the selection's N (a broken device).
	BadN int
	// Pays, if set, is SelectsTop's answer (nil: always true).
	Pays func(n, k int) bool

	Calls    int              // SelectTop calls
	Selected int              // of them, the ones that selected
	Reads    map[*float32]int // vocab-long Reads by destination
	NReads   int              // vocab-long Reads
}

// New returns a device for logits of vocab entries whose products run on
// be (CPU when nil).
func New(vocab int, be nn.Backend) *Device {
	return &Device{HostDevice: nn.HostDevice{Backend: be}, Vocab: vocab, Reads: map[*float32]int{}}
}

// Read implements nn.Device, recording vocab-long reads.
func (d *Device) Read(dst []float32, src nn.Tensor) error {
	if len(dst) == d.Vocab && d.Vocab > 0 {
		d.Reads[&dst[0]]++
		d.NReads++
	}
	return d.HostDevice.Read(dst, src)
}

// SelectTop implements nn.TopSelector with nn.SelectTopRef over x's
// floats (read from the device; not a logits read for Reads).
func (d *Device) SelectTop(c *nn.TopLogits, x nn.Tensor, n, k int) (bool, error) {
	d.Calls++
	c.Reset()
	if d.Err != nil {
		return false, d.Err
	}
	if d.Decline != nil && d.Decline(d.Calls) {
		return false, nil
	}
	buf := make([]float32, n)
	if err := d.HostDevice.Read(buf, x.Slice(0, n)); err != nil {
		return false, err
	}
	if !nn.SelectTopRef(c, buf, k, d.Limit) {
		return false, nil
	}
	if d.BadN != 0 {
		c.N = d.BadN
	}
	d.Selected++
	return true, nil
}

// SelectsTop implements nn.TopSelector: Pays's answer, else true.
func (d *Device) SelectsTop(n, k int) bool { return d.Pays == nil || d.Pays(n, k) }

// ResetCounts zeroes the counters and forgets the reads.
func (d *Device) ResetCounts() {
	d.Calls, d.Selected, d.NReads = 0, 0, 0
	clear(d.Reads)
}

// Backend returns a backend whose layer device is d (nn.Layered), with d's
// products on be (CPU when nil); it is a runtime.Allocator too when be is
// one (its dense weights and logits buffers then come from be).
func (d *Device) Backend(be runtime.Backend) runtime.Backend {
	d.HostDevice.Backend = be
	if be == nil {
		be = runtime.CPU{}
	}
	b := layered{Backend: be, d: d}
	if al, ok := be.(runtime.Allocator); ok {
		return allocLayered{layered: b, Allocator: al}
	}
	return b
}

type layered struct {
	runtime.Backend
	d *Device
}

func (b layered) LayerDevice() nn.Device { return b.d }

type allocLayered struct {
	layered
	runtime.Allocator
}

var (
	_ nn.Device      = (*Device)(nil)
	_ nn.TopSelector = (*Device)(nil)
	_ nn.Layered     = layered{}
)
