package qwen3next

import (
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime"
)

// The qwen3_next fused projection layout, worked out by hand for Nk = 2 key
// heads of dim 1 and Nv = 4 value heads of dim 1 (r = 2): each key head g
// contributes rows [q_g, k_g, v_2g, v_2g+1, z_2g, z_2g+1] to in_proj_qkvz and
// [b_2g, b_2g+1, a_2g, a_2g+1] to in_proj_ba. Destinations: q 0-1, k 2-3,
// v 4-7, z 8-11; b 0-3, a 4-7.
func TestFusedPermutationByHand(t *testing.T) {
	c := &runtime.Config{LinKeyHeads: 2, LinValueHeads: 4, LinKeyHeadDim: 1, LinValHeadDim: 1}
	perm, permBA := fusedPermutation(c)
	if want := []int32{0, 2, 4, 5, 8, 9, 1, 3, 6, 7, 10, 11}; !slices.Equal(perm, want) {
		t.Fatalf("perm = %v, want %v", perm, want)
	}
	if want := []int32{0, 1, 4, 5, 2, 3, 6, 7}; !slices.Equal(permBA, want) {
		t.Fatalf("permBA = %v, want %v", permBA, want)
	}
	// dk = 2, dv = 3, Nk = 1, Nv = 2: [q0 q1 | k0 k1 | v(6) | z(6)] is the identity.
	c = &runtime.Config{LinKeyHeads: 1, LinValueHeads: 2, LinKeyHeadDim: 2, LinValHeadDim: 3}
	perm, _ = fusedPermutation(c)
	for i, p := range perm {
		if int(p) != i {
			t.Fatalf("single key head: perm = %v, want the identity", perm)
		}
	}
}
