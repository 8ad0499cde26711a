package runner

import (
	"context"
	"errors"
)

// GenerateOptions are the inputs of Generate.
type GenerateOptions struct {
	Options    // how to load the model
	GenOptions // how to generate

	Prompt string
	// Chat wraps Prompt in the model's chat template as a user turn (with
	// System as the system prompt); otherwise Prompt is tokenized as is.
	Chat   bool
	System string
	// NoThink passes enable_thinking=false to the template (Qwen3).
	NoThink bool
}

// Generate loads the model at path, generates from opt.Prompt and closes
// the model: the one-call form of Open, NewSession and Session.Generate
// (or Session.Chat).
func Generate(ctx context.Context, path string, opt GenerateOptions) (*Result, error) {
	if opt.Prompt == "" {
		return nil, errors.New("generate: empty prompt")
	}
	r, err := Open(path, opt.Options)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	s := r.NewSession()
	if opt.Chat {
		var think *bool
		if opt.NoThink {
			f := false
			think = &f
		}
		return s.Chat(ctx, opt.Prompt, ChatOptions{GenOptions: opt.GenOptions, System: opt.System, EnableThinking: think})
	}
	return s.Generate(ctx, r.Tokenizer.Encode(opt.Prompt), opt.GenOptions)
}
