package qpack

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

func randBytes(n int, seed uint64) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// DigestLayer's digests are BLAKE3 of the whole input and of each stride,
// computed here in one call each; the shapes cover strides smaller than,
// equal to, larger than and not dividing the read block, and readers that
// return short reads.
func TestDigestLayerMatchesReference(t *testing.T) {
	cases := []struct {
		experts int
		stride  int64
	}{
		{1, 1},
		{3, 16384},
		{7, hashBlock},
		{3, hashBlock + 12345},
		{5, 3*hashBlock - 7},
		{40, 100_000},
	}
	for _, c := range cases {
		data := randBytes(c.experts*int(c.stride), uint64(c.stride))
		readers := map[string]func() io.Reader{
			"plain": func() io.Reader { return bytes.NewReader(data) },
			"half":  func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
			"odd": func() io.Reader {
				return io.MultiReader(bytes.NewReader(data[:len(data)/3]), bytes.NewReader(data[len(data)/3:]))
			},
		}
		for name, mk := range readers {
			var progressed int64
			fd, eds, err := DigestLayer(mk(), c.experts, c.stride, func(n int64) { progressed += n })
			if err != nil {
				t.Fatalf("%d x %d (%s): %v", c.experts, c.stride, name, err)
			}
			if fd != b3(data) {
				t.Errorf("%d x %d (%s): file digest %s, want %s", c.experts, c.stride, name, fd, b3(data))
			}
			if len(eds) != c.experts {
				t.Fatalf("%d x %d (%s): %d expert digests", c.experts, c.stride, name, len(eds))
			}
			for e := 0; e < c.experts; e++ {
				if want := b3(data[int64(e)*c.stride : int64(e+1)*c.stride]); eds[e] != want {
					t.Errorf("%d x %d (%s): expert %d digest %s, want %s", c.experts, c.stride, name, e, eds[e], want)
				}
			}
			if progressed != int64(len(data)) {
				t.Errorf("%d x %d (%s): progress reported %d bytes of %d", c.experts, c.stride, name, progressed, len(data))
			}
		}
	}
}

func TestDigestLayerErrors(t *testing.T) {
	const stride = hashBlock/2 + 3
	data := randBytes(5*stride, 1)
	_, _, err := DigestLayer(bytes.NewReader(data[:3*stride+10]), 5, stride, nil)
	if err == nil || !strings.Contains(err.Error(), "file ends inside expert 3") {
		t.Errorf("short file: %v", err)
	}
	if _, _, err := DigestLayer(bytes.NewReader(append(data, 1)), 5, stride, nil); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long file: %v", err)
	}
	boom := errors.New("disk on fire")
	r := io.MultiReader(bytes.NewReader(data[:2*hashBlock+5]), iotest.ErrReader(boom))
	if _, _, err := DigestLayer(r, 5, stride, nil); !errors.Is(err, boom) {
		t.Errorf("read error: %v", err)
	}
	for _, bad := range [][2]int64{{0, 10}, {3, 0}, {-1, 5}, {2, 1 << 62}} {
		if _, _, err := DigestLayer(bytes.NewReader(nil), int(bad[0]), bad[1], nil); err == nil {
			t.Errorf("shape %v: no error", bad)
		}
	}
}

func TestDigestFileMatchesReference(t *testing.T) {
	for _, n := range []int{0, 1, hashBlock - 1, hashBlock, hashBlock + 1, 5*hashBlock + 17} {
		data := randBytes(n, uint64(n)+7)
		var progressed int64
		got, err := DigestFile(iotest.HalfReader(bytes.NewReader(data)), func(k int64) { progressed += k })
		if err != nil {
			t.Fatal(err)
		}
		if got != b3(data) || progressed != int64(n) {
			t.Errorf("%d bytes: digest %s (want %s), progress %d", n, got, b3(data), progressed)
		}
	}
	boom := errors.New("boom")
	if _, err := DigestFile(io.MultiReader(bytes.NewReader(make([]byte, 3*hashBlock)), iotest.ErrReader(boom)), nil); !errors.Is(err, boom) {
		t.Errorf("read error: %v", err)
	}
}

// bigLayout has strides that do not divide the digest block.
func bigLayout(t *testing.T, experts, layers int) *Layout {
	t.Helper()
	l, err := NewLayout(experts, layers, make([]bool, layers), []SectionSpec{
		{"gate_proj.weight", "U32", []int64{96, 1024}}, // 393,216 B
		{"up_proj.weight", "U32", []int64{96, 1024}},   // 393,216 B
		{"down_proj.weight", "U32", []int64{256, 512}}, // 524,288 B
		{"down_proj.scales", "BF16", []int64{256, 17}}, // 8,704 B; stride 1,327,104 B
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Layers sealed while other layers are written by concurrent goroutines
// (and Syncs run) end up with the same digests as bytes hashed here; a
// sealed layer refuses writes. Run with -race.
func TestSealLayersWhileWriting(t *testing.T) {
	const experts, layers = 6, 5
	lay := bigLayout(t, experts, layers)
	dst := filepath.Join(t.TempDir(), "out.qpack")
	w, err := Create(dst, lay, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateDense(denseSpecs, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range denseSpecs {
		if err := w.WriteDenseTensor(s.Name, denseData(s.Name), 0); err != nil {
			t.Fatal(err)
		}
	}
	payloads := map[[2]int][]byte{}
	for l := 0; l < layers; l++ {
		for e := 0; e < experts; e++ {
			payloads[[2]int{l, e}] = randBytes(int(lay.Payload()), uint64(l*1000+e))
		}
	}
	payload := func(l, e int) []byte { return payloads[[2]int{l, e}] }

	stopSync := make(chan struct{})
	syncDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopSync:
				syncDone <- nil
				return
			default:
			}
			if err := w.Sync(); err != nil {
				syncDone <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, layers*experts)
	for l := 0; l < layers; l++ {
		wg.Add(1)
		go func(l int) {
			defer wg.Done()
			// Section by section, experts in reverse, as a repack would
			// scatter them.
			for _, s := range lay.Sections {
				for e := experts - 1; e >= 0; e-- {
					p := payload(l, e)
					if err := w.WriteSection(l, e, s.Name, p[s.Offset:s.Offset+s.Size], 0); err != nil {
						errs <- err
						return
					}
				}
			}
			if l != 2 { // layer 2 is left for Finish to hash
				if err := w.SealLayer(l); err != nil {
					errs <- err
				}
				if err := w.SealLayer(l); err != nil { // twice: no-op
					errs <- err
				}
			}
		}(l)
	}
	wg.Wait()
	close(stopSync)
	if err := <-syncDone; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(0, []byte{1}, 0); err == nil || !strings.Contains(err.Error(), "sealed") {
		t.Errorf("write to a sealed layer: %v", err)
	}
	if err := w.WriteExpert(3, 1, payload(3, 1)); err == nil {
		t.Error("WriteExpert to a sealed layer: no error")
	}
	if _, err := w.WriteAt(2, payload(2, 0), 0); err != nil { // not sealed: allowed
		t.Errorf("write to an unsealed layer: %v", err)
	}
	if err := w.SealLayer(layers); err == nil {
		t.Error("sealing a layer out of range: no error")
	}
	var last, total int64
	w.opts.HashProgress = func(d, tot int64) { last, total = d, tot }
	m, err := w.Finish(info)
	if err != nil {
		t.Fatal(err)
	}
	if last != total || total == 0 {
		t.Errorf("hash progress ended at %d of %d", last, total)
	}
	for l := 0; l < layers; l++ {
		var whole []byte
		for e := 0; e < experts; e++ {
			blob := make([]byte, lay.ExpertStride)
			copy(blob, payload(l, e))
			if got := m.Ext.ExpertDigests[LayerFile(l)][e]; got != b3(blob) {
				t.Errorf("layer %d expert %d digest %s, want %s", l, e, got, b3(blob))
			}
			whole = append(whole, blob...)
		}
		if got := m.Ext.FileDigests[LayerFile(l)]; got != b3(whole) {
			t.Errorf("layer %d file digest %s, want %s", l, got, b3(whole))
		}
		data, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(LayerFile(l))))
		if err != nil || !bytes.Equal(data, whole) {
			t.Errorf("layer %d bytes on disk differ (%v)", l, err)
		}
	}
	if err := w.SealLayer(0); err == nil {
		t.Error("SealLayer after Finish: no error")
	}
}

// Closing a writer while sealed layers are being hashed stops the hashing;
// another writer resumes the directory and finishes it with the right
// digests.
func TestCloseDuringSealHashing(t *testing.T) {
	const experts, layers = 20, 3
	lay := bigLayout(t, experts, layers)
	dst := filepath.Join(t.TempDir(), "out.qpack")
	w, err := Create(dst, lay, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateDense(denseSpecs, nil); err != nil {
		t.Fatal(err)
	}
	want := map[int][]byte{}
	for l := 0; l < layers; l++ {
		data := randBytes(int(lay.LayerSize()), uint64(l)+50)
		if _, err := w.WriteAt(l, data, 0); err != nil {
			t.Fatal(err)
		}
		want[l] = data
		if err := w.SealLayer(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.SealLayer(0); err == nil {
		t.Error("SealLayer after Close: no error")
	}
	w2, err := Create(dst, lay, CreateOptions{Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.CreateDense(denseSpecs, nil); err != nil {
		t.Fatal(err)
	}
	if err := w2.SealLayer(1); err != nil {
		t.Fatal(err)
	}
	m, err := w2.Finish(info)
	if err != nil {
		t.Fatal(err)
	}
	for l := 0; l < layers; l++ {
		if got := m.Ext.FileDigests[LayerFile(l)]; got != b3(want[l]) {
			t.Errorf("layer %d digest %s, want %s", l, got, b3(want[l]))
		}
		if got := m.Ext.ExpertDigests[LayerFile(l)][experts-1]; got != b3(want[l][(experts-1)*int(lay.ExpertStride):]) {
			t.Errorf("layer %d last expert digest %s", l, got)
		}
	}
}
