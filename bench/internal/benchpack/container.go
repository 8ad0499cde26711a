package benchpack

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/qpack-go/qpack/runtime/synthetic"
)

// UniqueExperts is how many experts per layer are drawn (the others repeat
// their bytes, each written out).
const UniqueExperts = 32

// QwenWriter returns a function that streams a qwen3_next / qwen3_5_moe
// container at dims(layers, vocab) to pack (UniqueExperts drawn per layer).
func QwenWriter(dims func(layers, vocab int) synthetic.Dims) func(pack string, layers, vocab int) error {
	return func(pack string, layers, vocab int) error {
		d := dims(layers, vocab)
		d.Unique = UniqueExperts
		return synthetic.StreamContainer(pack, d, 1)
	}
}

// WriteGemma streams a Gemma 4 26B-A4B container for layers and vocab.
func WriteGemma(pack string, layers, vocab int) error {
	d := synthetic.Gemma26B(layers, vocab)
	d.Unique = UniqueExperts
	return synthetic.StreamGemmaContainer(pack, d, 1)
}

// BlobBytes is one MLX-quantized expert: gate and up [inter, hidden], down
// [hidden, inter], with BF16 scales and biases per group.
func BlobBytes(hidden, inter, bits, group int) int64 {
	mat := func(rows, cols int) int64 { return int64(rows) * int64(cols*bits/8+2*2*(cols/group)) }
	return 2*mat(inter, hidden) + mat(hidden, inter)
}

// QwenExperts returns the routed experts' size on disk for a number of
// layers at dims.
func QwenExperts(dims func(layers, vocab int) synthetic.Dims) func(layers int) int64 {
	return func(layers int) int64 {
		d := dims(layers, 1)
		return int64(layers) * int64(d.Experts) * BlobBytes(d.Hidden, d.MoEInter, d.Bits, d.Group)
	}
}

// GemmaExperts is QwenExperts for Gemma 4 26B-A4B.
func GemmaExperts(layers int) int64 {
	d := synthetic.Gemma26B(layers, 1)
	return int64(layers) * int64(d.Experts) * BlobBytes(d.Hidden, d.MoEInter, d.Bits, d.Group)
}

// WriteModel runs write(pack, layers, vocab) and copies the tokenizer.json
// of testdata/tiny/<tokenizer> beside it (the benchmarks feed token ids,
// but a model directory needs one).
func WriteModel(write func(pack string, layers, vocab int) error, tokenizer, pack string, layers, vocab int) error {
	if err := write(pack, layers, vocab); err != nil {
		return err
	}
	tok, err := FindTokenizer(tokenizer)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(tok)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(pack, "tokenizer.json"), data, 0o644)
}

// FindTokenizer finds testdata/tiny/<model>/tokenizer.json from the working
// directory upwards.
func FindTokenizer(model string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "testdata", "tiny", model, "tokenizer.json")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testdata/tiny/%s/tokenizer.json not found above the working directory: run from the repository", model)
		}
		dir = parent
	}
}

// FreeBytes returns the bytes available to an unprivileged user on dir's
// file system.
func FreeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// RoomNeeded is what CheckRoom asks for expertBytes of experts: a tenth
// more and 1 GiB for the dense weights and the file system.
func RoomNeeded(expertBytes int64) int64 { return expertBytes + expertBytes/10 + 1<<30 }

// CheckRoom refuses to write expertBytes (plus a tenth and 1 GiB for the
// dense weights and the file system) where dir's file system has less free.
func CheckRoom(dir string, expertBytes int64) error {
	free, err := FreeBytes(dir)
	if err != nil {
		return err
	}
	need := RoomNeeded(expertBytes)
	if free < need {
		return fmt.Errorf("%s: %d MiB free, the container needs about %d MiB (-dir elsewhere, or fewer -layers)", dir, free>>20, need>>20)
	}
	return nil
}
