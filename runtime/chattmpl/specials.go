package chattmpl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// specialVars are the special tokens transformers' apply_chat_template hands
// to every template (from the tokenizer's special_tokens_map). Gemma 4's
// templates open with {{ bos_token }}: without it the prompt lacks <bos>.
var specialVars = []string{"bos_token", "eos_token", "unk_token", "pad_token", "mask_token"}

// LoadDir finds the chat template of a model directory: chat_template.jinja,
// else chat_template.json's "chat_template", else tokenizer_config.json's
// "chat_template" (a string, or a list of {"name", "template"}). A model
// without one gives an error wrapping ErrNoTemplate. The special tokens of
// tokenizer_config.json (bos_token, eos_token, ...) become template variables,
// as in transformers, unless Options or Options.Vars set them.
func LoadDir(dir string) (*Template, error) {
	t, err := loadDirTemplate(dir)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "tokenizer_config.json")
	data, err := readBounded(p, MaxConfigSize)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chattmpl: %w", err)
	}
	if t.specials, err = specialTokens(data); err != nil {
		return nil, fmt.Errorf("chattmpl: %s: %w", p, err)
	}
	return t, nil
}

// specialTokens reads the specialVars of a tokenizer_config.json: each a
// string, an AddedToken object {"content": ...}, or null.
func specialTokens(data []byte) (map[string]string, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range specialVars {
		raw, ok := cfg[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			var obj struct {
				Content *string `json:"content"`
			}
			if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
				return nil, fmt.Errorf("%s is neither a string nor an object with a content", k)
			}
			s = *obj.Content
		}
		if len(s) > 1<<10 {
			return nil, fmt.Errorf("%s is %d bytes long", k, len(s))
		}
		out[k] = s
	}
	return out, nil
}

// addSpecials sets the special-token variables the caller left unset.
func (t *Template) addSpecials(vars map[string]any) {
	for k, v := range t.specials {
		if _, set := vars[k]; !set {
			vars[k] = v
		}
	}
}
