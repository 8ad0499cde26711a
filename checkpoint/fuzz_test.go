package checkpoint

import (
	"bytes"
	"context"
	"testing"
)

// memShard serves bytes as a shard.
type memShard struct{ b []byte }

func (m memShard) ReadAtContext(_ context.Context, p []byte, off int64) (int, error) {
	return bytes.NewReader(m.b).ReadAt(p, off)
}

// readHeader on any bytes: no panic; on success the kept header bytes are
// exactly the file's first DataStart bytes, and a stream check of the file
// itself passes while one with any header byte changed fails.
func FuzzReadHeader(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Add([]byte("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}     xy"))
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, h, err := readHeader(context.Background(), memShard{data}, int64(len(data)), "fuzz.safetensors")
		if err != nil {
			return
		}
		if int64(len(raw)) != h.DataStart || !bytes.Equal(raw, data[:h.DataStart]) {
			t.Fatalf("header bytes are not the file's first %d bytes", h.DataStart)
		}
		sh := &Shard{name: "fuzz.safetensors", raw: raw}
		c := sh.NewStreamCheck(0)
		c.Write(data)
		if c.Err() != nil {
			t.Fatalf("the file itself fails its stream check: %v", c.Err())
		}
		bad := append([]byte(nil), data...)
		bad[len(raw)-1] ^= 1
		c = sh.NewStreamCheck(0)
		c.Write(bad)
		if c.Err() == nil {
			t.Fatal("a changed header byte passes the stream check")
		}
	})
}
