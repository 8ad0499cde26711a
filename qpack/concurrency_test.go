package qpack

import (
	"bytes"
	"crypto/rand"
	"io"
	"sync"
	"testing"

	"github.com/zeebo/blake3"
)

// Many goroutines reading experts at once (run with -race) see the right
// bytes, including the lazy first open of each layer file.
func TestReadExpertConcurrent(t *testing.T) {
	c, err := Open(newSwiftFixture().write(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			buf := make([]byte, c.Layout.ExpertStride)
			for i := 0; i < 30; i++ {
				l, e := (g+i)%2, (g*7+i)%3
				if err := c.ReadExpert(l, e, buf); err != nil {
					errs <- err.Error()
					return
				}
				if !bytes.Equal(buf[:tinyPayload], expertBytes(l, e)) {
					errs <- "wrong bytes"
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestDigestLayerLength(t *testing.T) {
	data := make([]byte, 3*16384)
	if _, _, err := DigestLayer(bytes.NewReader(data[:len(data)-1]), 3, 16384, nil); err == nil {
		t.Error("short layer file: no error")
	}
	if _, _, err := DigestLayer(bytes.NewReader(append(data, 0)), 3, 16384, nil); err == nil {
		t.Error("long layer file: no error")
	}
}

// BenchmarkDigestLayer hashes a layer-sized buffer as Finish does (file
// digest + one digest per stride) and, as the baseline in the same run,
// with one plain BLAKE3 pass; "x_baseline" is the time ratio.
func BenchmarkDigestLayer(b *testing.B) {
	const stride = 1769472
	const experts = 32
	data := make([]byte, stride*experts)
	rand.Read(data)
	b.SetBytes(int64(len(data)))
	var base, ours float64
	b.Run("baseline-blake3-once", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			h := blake3.New()
			io.Copy(h, bytes.NewReader(data))
			h.Sum(nil)
		}
		base = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("DigestLayer", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			if _, _, err := DigestLayer(bytes.NewReader(data), experts, stride, nil); err != nil {
				b.Fatal(err)
			}
		}
		ours = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if base > 0 {
			b.ReportMetric(ours/base, "x_baseline")
		}
	})
}
