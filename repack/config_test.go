package repack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/modelconfig"
)

// files is a FileReader over a map, standing for any source.
type files map[string][]byte

func (f files) ReadFile(_ context.Context, name string, max int64) ([]byte, error) {
	b, ok := f[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: too large", name)
	}
	return b, nil
}

func TestCheckConfig(t *testing.T) {
	good, err := os.ReadFile("../testdata/tiny/qwen3_5_moe-q4g32/config.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := CheckConfig(context.Background(), files{"config.json": good})
	if err != nil || c.ModelType != "qwen3_5_moe" || c.Experts != 8 || c.Model == nil {
		t.Fatalf("%+v %v", c, err)
	}
	bad := []byte(strings.Replace(string(good), `"num_experts_per_tok": 2`, `"num_experts_per_tok": 12`, 1))
	_, err = CheckConfig(context.Background(), files{"config.json": bad})
	if !errors.Is(err, modelconfig.ErrConfig) || !strings.Contains(err.Error(), "text_config.num_experts_per_tok: 12 is more than num_experts 8") {
		t.Fatalf("err = %v", err)
	}
	_, err = CheckConfig(context.Background(), files{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no config.json") {
		t.Fatalf("no config: %v", err)
	}
}
