package benchpack

import (
	"math/rand/v2"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/runtime/expertcache"
)

// PreadBandwidth reads random whole expert blobs of the container's layer
// files for about dur with `readers` reads in flight, in the given mode, and
// returns bytes per second: the numerator of the I/O limit (bandwidth ÷
// bytes read per token).
func PreadBandwidth(pack string, mode expertcache.IOMode, readers int, dur time.Duration, seed uint64) (float64, error) {
	c, err := qpack.Open(pack)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	lay := c.Layout
	stride := lay.ExpertStride
	files := make([]*os.File, lay.LayerCount)
	for l := range files {
		p := c.LayerPath(l)
		var f *os.File
		if mode == expertcache.Direct {
			f = expertcache.OpenDirect(p)
		}
		if f == nil {
			if f, err = os.Open(p); err != nil {
				return 0, err
			}
		}
		defer f.Close()
		files[l] = f
	}
	var total int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(dur)
	t0 := time.Now()
	var firstErr error
	for w := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := AlignedBuf(stride)
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			var n int64
			for time.Now().Before(deadline) {
				l, e := r.IntN(lay.LayerCount), r.IntN(lay.ExpertCount)
				got, err := files[l].ReadAt(buf, int64(e)*stride)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				n += int64(got)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(total) / time.Since(t0).Seconds(), nil
}

// AlignedBuf returns n bytes starting at an expertcache.Align boundary.
func AlignedBuf(n int64) []byte {
	b := make([]byte, n+expertcache.Align)
	off := int64(uintptr(unsafe.Pointer(&b[0])) % expertcache.Align)
	if off != 0 {
		off = expertcache.Align - off
	}
	return b[off : off+n]
}
