// Package devicetest is the conformance suite of the whole-layer seam
// (nn.Device): every backend runs it from its own tests.
//
//   - Ops(t, dev, tol) checks every Device method against float64 scalar
//     references written here (not HostDevice's code) on seeded random
//     inputs: odd widths, strides, T = 1 and T > 1, every NormKind and RoPE
//     form, full and sliding attention with GQA, QStride > HeadDim and
//     VDim ≠ HeadDim, KV and TensorState Reset / Clone / Restore, DeltaNet
//     chunked against token-by-token, routing (ties included), MatMul for
//     every mlxq format, determinism, Temp, Write/Read/Copy and the expert
//     rule (an expert's bytes overwritten right after its work is queued
//     must not change the result). Max errors are reported with t.Logf so
//     a device's test log shows them.
//   - Models(t, be, tol) runs every tiny model of testdata/tiny through a
//     runtime.Backend (one that implements nn.Layered runs its own Device)
//     against runtime.CPU: logits, greedy tokens, chunked prefill against
//     step-by-step decode, and a repacked .qpack with a one-slot expert
//     cache against every expert resident.
//   - Strict is a Device wrapping nn.HostDevice that checks the contract
//     from the graphs' side: its own Buffer (host access to its tensors or
//     mixing devices panics), ops queued and run only at the waits, expert
//     bytes copied at call time, Temps poisoned after EndPass, and every
//     spec bounds-checked against its tensors.
//
// A backend runs the suite from a test of its own package:
//
//	func TestDeviceConformance(t *testing.T) {
//		dev := myBackend.LayerDevice()
//		devicetest.Ops(t, dev, devicetest.DefaultTolerances())
//	}
//
//	func TestModelsConformance(t *testing.T) {
//		devicetest.Models(t, myBackend) // default bounds
//	}
//
// A graph-side test runs a model on the strict device through
// NewStrictBackend (a runtime.Backend implementing nn.Layered), as
// runtime's device_conformance_test.go does: every tiny model there is
// bit-identical to the host device. The suite's own tests show it can
// fail: one-bug mutants of the host device each fail the Ops subtest that
// covers them, and a device that reads an expert's bytes after Release
// fails Models' one-slot expert cache check.
//
// Models finds testdata/tiny by walking up from the test's working
// directory to the module root, and skips (saying why) when it is absent.
// Tolerances' zero fields take the defaults, so a backend loosens only the
// bounds it must (and says why).
package devicetest
