package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// attention_tile on the GPU at Qwen3.6-35B's attention dims (16 query
// heads over 2 KV heads of 256 dims): a prompt of 300 tokens, then a chunk
// of 64 over the cache, full and with a sliding window of 128, against the
// host's KVCache.Attend, and against the per-(token, head) kernel; then a
// decode step and a chunk of two (attention_gqa, split into runs).
func TestAttentionTileGPU(t *testing.T) {
	b := openOrSkip(t)
	l := b.LayerDevice().(*Layer)
	d := nn.AttnDims{Heads: 16, KVHeads: 2, HeadDim: 256, QStride: 512, Scale: 0.0625}
	kw, vw := d.KVHeads*d.HeadDim, d.KVHeads*d.HeadDim
	for _, window := range []int{0, 128} {
		for _, off := range []bool{false, true} {
			b.attnTileOff = off
			ref := nn.NewKVCache(kw, vw, window)
			kv, err := l.NewKV(kw, vw, window)
			if err != nil {
				t.Fatal(err)
			}
			rr := rand.New(rand.NewPCG(87, uint64(window)))
			for _, T := range []int{300, 64, 1, 2} { // then decode steps: attention_gqa
				q, k, v := randVec(rr, T*d.Heads*d.QStride, 1), randVec(rr, T*kw, 1), randVec(rr, T*vw, 1)
				want := make([]float32, T*d.Heads*d.HeadDim)
				ref.Attend(want, q, k, v, T, d)
				O := l.Temp(len(want))
				l.Attention(kv, O, put(t, l, q), put(t, l, k), put(t, l, v), T, d)
				got := get(t, l, O)
				if err := l.EndPass(); err != nil {
					t.Fatal(err)
				}
				near(t, fmt.Sprintf("window %d, chunk of %d, tiles off %v", window, T, off), got, want, 2e-5)
			}
		}
	}
	b.attnTileOff = false
}
