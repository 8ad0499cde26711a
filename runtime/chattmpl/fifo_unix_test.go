//go:build unix

package chattmpl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/internal/fifotest"
)

// A FIFO in place of any file LoadDir reads is refused, not waited on.
func TestLoadDirRefusesFIFO(t *testing.T) {
	const cfg = `{"chat_template": "{{ messages|length }}"}`
	cases := []struct {
		fifo    string
		regular map[string]string
	}{
		{"chat_template.jinja", nil},
		{"chat_template.json", nil},
		{"tokenizer_config.json", nil},
		// The template found, then tokenizer_config.json read for its
		// special tokens.
		{"tokenizer_config.json", map[string]string{"chat_template.jinja": "{{ bos_token }}"}},
		{"tokenizer_config.json", map[string]string{"chat_template.json": cfg}},
	}
	for _, c := range cases {
		dir := t.TempDir()
		for name, body := range c.regular {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		p := filepath.Join(dir, c.fifo)
		fifotest.Make(t, p)
		fifotest.Refused(t, p, func() error { _, err := LoadDir(dir); return err })
	}
}
