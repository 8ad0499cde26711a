// Package cpurun runs the shared kernel bodies (package gpukernels) on the
// CPU, for tests: Build compiles them with g++ through a CPU prelude
// (src/prelude_cpu.h: the dialect's names over fibers) and an executor
// (src/exec.cpp: groups in order, each group's 256 threads as fibers with real
// barriers and simdgroup reductions, buffers ending at guard pages);
// Harness.Launch runs one launch in the harness's executor process (one
// process for many launches; a failed or crashed launch ends it and the
// next starts another). The CPU prelude is
// stricter than CUDA in two ways that Metal needs: thread ids exist only in
// a kernel body, and a reduction or barrier with a returned thread is an
// error.
package cpurun
