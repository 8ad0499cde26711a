package expertcache

import (
	"fmt"
	"unsafe"
)

// allocSlot returns an n-byte slot buffer: from Options.Alloc if set, else
// anonymous aligned memory.
func (c *Cache) allocSlot(n int64) ([]byte, error) {
	if c.opt.Alloc == nil {
		return allocAligned(n)
	}
	buf, err := c.opt.Alloc(n)
	if err != nil {
		return nil, err
	}
	if int64(len(buf)) < n {
		c.opt.Free(buf)
		return nil, fmt.Errorf("Options.Alloc returned %d bytes", len(buf))
	}
	if c.opt.IO == Direct && uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%Align != 0 {
		c.opt.Free(buf)
		return nil, fmt.Errorf("Options.Alloc returned memory that is not %d-byte aligned, which direct reads need", Align)
	}
	return buf[:n:n], nil
}

// freeSlot gives back a buffer from allocSlot.
func (c *Cache) freeSlot(buf []byte) {
	if buf == nil {
		return
	}
	if c.opt.Free != nil {
		c.opt.Free(buf)
		return
	}
	freeAligned(buf)
}
