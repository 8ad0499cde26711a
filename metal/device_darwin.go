//go:build darwin

package metal

import (
	"fmt"
	"runtime"
	"structs"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// The Metal device through the Objective-C runtime (purego's objc package,
// no cgo). Every call that may autorelease runs on a locked OS thread inside
// an NSAutoreleasePool.

// mtlSize is MTLSize (three NSUIntegers).
type mtlSize struct {
	_                    structs.HostLayout
	Width, Height, Depth uint64
}

const (
	mtlResourceStorageModeShared = 0 // MTLResourceStorageModeShared | MTLResourceCPUCacheModeDefaultCache
	mtlCommandBufferCompleted    = 4 // MTLCommandBufferStatusCompleted
	mtlResourceUsageRead         = 1 // MTLResourceUsageRead
	mtlResourceUsageWrite        = 2 // MTLResourceUsageWrite
)

var (
	mtlOnce                      sync.Once
	mtlErr                       error
	mtlCreateSystemDefaultDevice func() objc.ID

	clsNSString, clsNSAutoreleasePool, clsMTLCompileOptions objc.ID

	selAlloc, selInit, selRelease, selDrain, selStringWithUTF8String, selUTF8String,
	selLocalizedDescription, selName, selNewCommandQueue, selNewLibraryWithSource,
	selSetFastMathEnabled, selNewFunctionWithName, selNewComputePipelineState,
	selMaxTotalThreadsPerThreadgroup, selThreadExecutionWidth, selNewBufferWithBytesNoCopy,
	selCommandBuffer, selComputeCommandEncoder, selSetComputePipelineState, selSetBuffer,
	selSetBytes, selDispatchThreadgroups, selEndEncoding, selCommit, selWaitUntilCompleted,
	selStatus, selError, selGPUAddress, selUseResource, selRetain, selLength,
	selRespondsToSelector, selSetMathMode objc.SEL
)

func loadMetal() error {
	mtlOnce.Do(func() {
		if _, err := purego.Dlopen("/System/Library/Frameworks/Foundation.framework/Foundation", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			mtlErr = fmt.Errorf("metal: loading Foundation: %v: %w", err, ErrUnsupported)
			return
		}
		lib, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			mtlErr = fmt.Errorf("metal: loading Metal.framework: %v: %w", err, ErrUnsupported)
			return
		}
		// Some macOS versions find no GPU for a process that has not loaded
		// CoreGraphics; loading it is harmless where it is not needed.
		_, _ = purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		sym, err := purego.Dlsym(lib, "MTLCreateSystemDefaultDevice")
		if err != nil {
			mtlErr = fmt.Errorf("metal: MTLCreateSystemDefaultDevice: %v: %w", err, ErrUnsupported)
			return
		}
		purego.RegisterFunc(&mtlCreateSystemDefaultDevice, sym)

		clsNSString = objc.ID(objc.GetClass("NSString"))
		clsNSAutoreleasePool = objc.ID(objc.GetClass("NSAutoreleasePool"))
		clsMTLCompileOptions = objc.ID(objc.GetClass("MTLCompileOptions"))
		if clsNSString == 0 || clsNSAutoreleasePool == 0 || clsMTLCompileOptions == 0 {
			mtlErr = fmt.Errorf("metal: Foundation/Metal classes not found: %w", ErrUnsupported)
			return
		}
		for _, s := range []struct {
			p    *objc.SEL
			name string
		}{
			{&selAlloc, "alloc"}, {&selInit, "init"}, {&selRelease, "release"}, {&selDrain, "drain"},
			{&selStringWithUTF8String, "stringWithUTF8String:"}, {&selUTF8String, "UTF8String"},
			{&selLocalizedDescription, "localizedDescription"}, {&selName, "name"},
			{&selNewCommandQueue, "newCommandQueue"},
			{&selNewLibraryWithSource, "newLibraryWithSource:options:error:"},
			{&selSetFastMathEnabled, "setFastMathEnabled:"},
			{&selNewFunctionWithName, "newFunctionWithName:"},
			{&selNewComputePipelineState, "newComputePipelineStateWithFunction:error:"},
			{&selMaxTotalThreadsPerThreadgroup, "maxTotalThreadsPerThreadgroup"},
			{&selThreadExecutionWidth, "threadExecutionWidth"},
			{&selNewBufferWithBytesNoCopy, "newBufferWithBytesNoCopy:length:options:deallocator:"},
			{&selCommandBuffer, "commandBuffer"}, {&selComputeCommandEncoder, "computeCommandEncoder"},
			{&selSetComputePipelineState, "setComputePipelineState:"},
			{&selSetBuffer, "setBuffer:offset:atIndex:"}, {&selSetBytes, "setBytes:length:atIndex:"},
			{&selDispatchThreadgroups, "dispatchThreadgroups:threadsPerThreadgroup:"},
			{&selEndEncoding, "endEncoding"}, {&selCommit, "commit"},
			{&selWaitUntilCompleted, "waitUntilCompleted"}, {&selStatus, "status"}, {&selError, "error"},
			{&selGPUAddress, "gpuAddress"}, {&selUseResource, "useResource:usage:"}, {&selRetain, "retain"},
			{&selLength, "length"}, {&selRespondsToSelector, "respondsToSelector:"}, {&selSetMathMode, "setMathMode:"},
		} {
			*s.p = objc.RegisterName(s.name)
		}
	})
	return mtlErr
}

// withPool runs f on a locked OS thread inside an autorelease pool.
func withPool(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := clsNSAutoreleasePool.Send(selAlloc).Send(selInit)
	defer pool.Send(selDrain)
	return f()
}

func nsString(s string) objc.ID { return clsNSString.Send(selStringWithUTF8String, s) }

// goString copies an NSString.
func goString(ns objc.ID) string {
	if ns == 0 {
		return ""
	}
	p := objc.Send[*byte](ns, selUTF8String)
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// errorText is an NSError's localized description.
func errorText(nserr objc.ID) string {
	if nserr == 0 {
		return "no error information"
	}
	return goString(nserr.Send(selLocalizedDescription))
}

type mtlDevice struct {
	dev, queue, library objc.ID
	psos                map[string]objc.ID
	name                string
	page                int
	// gpuAddresses: buffers have gpuAddress (Metal 3, macOS 13+), which
	// the kernels of the shared dialect need.
	gpuAddresses bool
	// limited: shared-dialect kernels whose pipeline allows fewer than
	// QP_TG threads per threadgroup (register pressure); not launched.
	limited map[string]bool
}

// openSystemDevice opens the default Metal device and compiles src, making
// one compute pipeline per kernel of lib.
func openSystemDevice(src string, lib *library) (device, error) {
	if err := loadMetal(); err != nil {
		return nil, err
	}
	d := &mtlDevice{psos: map[string]objc.ID{}, page: syscall.Getpagesize(), limited: map[string]bool{}}
	err := withPool(func() error {
		d.dev = mtlCreateSystemDefaultDevice()
		if d.dev == 0 {
			return fmt.Errorf("metal: MTLCreateSystemDefaultDevice found no GPU: %w", ErrUnsupported)
		}
		d.name = goString(d.dev.Send(selName))
		d.queue = d.dev.Send(selNewCommandQueue)
		if d.queue == 0 {
			return fmt.Errorf("metal: %s: newCommandQueue failed", d.name)
		}
		opts := clsMTLCompileOptions.Send(selAlloc).Send(selInit)
		// IEEE semantics for exp/log/inf, so the kernels match the CPU:
		// mathMode = MTLMathModeSafe (0) where it exists (macOS 15;
		// setFastMathEnabled: is deprecated there), else fast math off.
		if objc.Send[bool](opts, selRespondsToSelector, selSetMathMode) {
			opts.Send(selSetMathMode, uint64(0))
		} else {
			opts.Send(selSetFastMathEnabled, false)
		}
		var nserr objc.ID
		d.library = d.dev.Send(selNewLibraryWithSource, nsString(src), opts, unsafe.Pointer(&nserr))
		opts.Send(selRelease)
		if d.library == 0 {
			return fmt.Errorf("metal: %s: compiling the kernels: %s", d.name, errorText(nserr))
		}
		for _, name := range lib.names {
			fn := d.library.Send(selNewFunctionWithName, nsString(name))
			if fn == 0 {
				return fmt.Errorf("metal: %s: kernel %s missing from the compiled library", d.name, name)
			}
			nserr = 0
			pso := d.dev.Send(selNewComputePipelineState, fn, unsafe.Pointer(&nserr))
			fn.Send(selRelease)
			if pso == 0 {
				return fmt.Errorf("metal: %s: pipeline for kernel %s: %s", d.name, name, errorText(nserr))
			}
			d.psos[name] = pso
			if n := uint64(pso.Send(selMaxTotalThreadsPerThreadgroup)); n < tgThreads {
				if lib.kernels[name].Entry {
					// A layer kernel: its op runs on the CPU instead.
					d.limited[name] = true
				} else {
					return fmt.Errorf("metal: %s: kernel %s allows %d threads per threadgroup, needs %d", d.name, name, n, tgThreads)
				}
			}
			if w := uint64(pso.Send(selThreadExecutionWidth)); w != simdWidth {
				// Intel and AMD Macs (SIMD width 64 or other): refused as
				// unsupported, so callers fall back to the CPU backend.
				return fmt.Errorf("metal: %s: SIMD width %d, the kernels need %d: %w", d.name, w, simdWidth, ErrUnsupported)
			}
		}
		return nil
	})
	if err != nil {
		d.close()
		return nil, err
	}
	// Probe once whether buffers have GPU addresses.
	if r, err := d.alloc(1); err == nil {
		d.gpuAddresses = r.gpu != 0
		d.free(r)
	}
	return d, nil
}

func (d *mtlDevice) addressable() bool { return d.gpuAddresses }

func (d *mtlDevice) unusable() map[string]bool { return d.limited }

func (d *mtlDevice) deviceName() string { return d.name }

// alloc maps page-aligned anonymous memory and wraps it, without copying,
// in a shared-storage MTLBuffer.
func (d *mtlDevice) alloc(n int) (*region, error) {
	size := (n + d.page - 1) / d.page * d.page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	var buf objc.ID
	var length, gpu uint64
	_ = withPool(func() error {
		buf = d.dev.Send(selNewBufferWithBytesNoCopy, unsafe.Pointer(unsafe.SliceData(mem)), uint64(size),
			uint64(mtlResourceStorageModeShared), objc.ID(0))
		if buf == 0 {
			return nil
		}
		// Some macOS VMs return a zero-length buffer instead of nil.
		length = objc.Send[uint64](buf, selLength)
		if objc.Send[bool](buf, selRespondsToSelector, selGPUAddress) {
			gpu = objc.Send[uint64](buf, selGPUAddress)
		}
		return nil
	})
	if buf == 0 || length < uint64(size) {
		if buf != 0 {
			_ = withPool(func() error { buf.Send(selRelease); return nil })
		}
		_ = syscall.Munmap(mem)
		return nil, fmt.Errorf("%s: newBufferWithBytesNoCopy refused %d bytes (buffer length %d)", d.name, size, length)
	}
	return &region{mem: mem, handle: uintptr(buf), gpu: gpu}, nil
}

func (d *mtlDevice) free(r *region) {
	if r.handle != 0 {
		_ = withPool(func() error { objc.ID(r.handle).Send(selRelease); return nil })
		r.handle = 0
	}
	if r.mem != nil {
		_ = syscall.Munmap(r.mem)
		r.mem = nil
	}
}

// submit encodes the launches into one command buffer (one serial compute
// encoder: each dispatch sees the writes of the ones before) and commits
// it; the returned wait blocks until it completed and checks its status.
// Command buffers of the queue run in commit order. A launch of the shared
// dialect has its regions made resident with useResource:usage: (its
// parameter block holds their GPU addresses).
func (d *mtlDevice) submit(ls []*launch) (func() error, error) {
	var cb objc.ID
	err := withPool(func() error {
		cb = d.queue.Send(selCommandBuffer)
		if cb == 0 {
			return fmt.Errorf("%s: no command buffer", d.name)
		}
		enc := cb.Send(selComputeCommandEncoder)
		if enc == 0 {
			return fmt.Errorf("%s: no compute encoder", d.name)
		}
		for _, l := range ls {
			pso, ok := d.psos[l.kernel]
			if !ok || len(l.params) == 0 {
				enc.Send(selEndEncoding)
				return fmt.Errorf("%s: no pipeline for kernel %s", d.name, l.kernel)
			}
			enc.Send(selSetComputePipelineState, pso)
			for i, r := range l.bufs {
				enc.Send(selSetBuffer, objc.ID(r.handle), uint64(0), uint64(i))
			}
			for _, u := range l.uses {
				usage := uint64(mtlResourceUsageRead)
				if u.write {
					usage |= mtlResourceUsageWrite
				}
				enc.Send(selUseResource, objc.ID(u.r.handle), usage)
			}
			enc.Send(selSetBytes, unsafe.Pointer(unsafe.SliceData(l.params)), uint64(len(l.params)), uint64(len(l.bufs)))
			enc.Send(selDispatchThreadgroups,
				mtlSize{Width: uint64(l.grid[0]), Height: uint64(l.grid[1]), Depth: uint64(l.grid[2])},
				mtlSize{Width: uint64(l.group[0]), Height: uint64(l.group[1]), Depth: uint64(l.group[2])})
		}
		enc.Send(selEndEncoding)
		// The command buffer is autoreleased: keep it past the pool until
		// its wait.
		cb.Send(selRetain)
		cb.Send(selCommit)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() error {
		return withPool(func() error {
			defer cb.Send(selRelease)
			cb.Send(selWaitUntilCompleted)
			if st := uint64(cb.Send(selStatus)); st != mtlCommandBufferCompleted {
				return fmt.Errorf("%s: command buffer failed (status %d): %s", d.name, st, errorText(cb.Send(selError)))
			}
			return nil
		})
	}, nil
}

func (d *mtlDevice) close() error {
	return withPool(func() error {
		for name, p := range d.psos {
			p.Send(selRelease)
			delete(d.psos, name)
		}
		for _, o := range []*objc.ID{&d.library, &d.queue, &d.dev} {
			if *o != 0 {
				o.Send(selRelease)
				*o = 0
			}
		}
		return nil
	})
}
