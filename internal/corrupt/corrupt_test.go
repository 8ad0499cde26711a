package corrupt

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestDamage(t *testing.T) {
	body := []byte(`{"layers.0.mlp.gate":{"dtype":"U32"},"layers.1.mlp.gate":{"dtype":"BF16"}}`)
	for k := Kind(0); k < NumKinds; k++ {
		for seed := uint64(0); seed < 20; seed++ {
			got, what := Damage(body, k, rand.New(rand.NewPCG(seed, 1)))
			if bytes.Equal(got, body) {
				t.Fatalf("%s seed %d: nothing changed (%s)", k, seed, what)
			}
			switch k {
			case Truncate:
				if len(got) >= len(body) || !bytes.HasPrefix(body, got) {
					t.Fatalf("truncate: %q", got)
				}
			default:
				if len(got) != len(body) {
					t.Fatalf("%s changed the length", k)
				}
			}
		}
	}
	// Two names of one length are what a swap exchanges.
	got, what := Damage(body, SwapStrings, rand.New(rand.NewPCG(3, 3)))
	if !bytes.Contains(got, []byte(`"layers.1.mlp.gate":{"dtype":"U32"}`)) {
		t.Fatalf("swap: %s (%s)", got, what)
	}
}
