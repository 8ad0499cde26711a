package main

import "testing"

// The experts' size on disk, used for the free-space check, is the blob
// size the formats give: flash-moe's 7,077,888 B for Qwen3.5-397B, the
// 35B's 1,769,472 B, and 3,345,408 B for Gemma 4 26B-A4B.
func TestExpertBytes(t *testing.T) {
	for _, c := range []struct {
		dims string
		blob int64
		e    int64
	}{{"397b", 7077888, 512}, {"35b", 1769472, 256}, {"gemma26b", 3345408, 128}} {
		if got := benchDimsOf[c.dims].expertBytes(2); got != 2*c.e*c.blob {
			t.Errorf("%s: %d bytes of experts for 2 layers, want %d", c.dims, got, 2*c.e*c.blob)
		}
	}
}

func TestParseFracs(t *testing.T) {
	got, err := parseFracs("5, 15,100")
	if err != nil || len(got) != 3 || got[0] != 0.05 || got[1] != 0.15 || got[2] != 1 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "0", "101", "5,,15", "x"} {
		if _, err := parseFracs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
