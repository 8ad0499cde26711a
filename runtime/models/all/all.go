// Package all registers every architecture of the runner with package
// runtime: import it for its side effect wherever models are loaded. It is
// the one list of architectures; adding one is a line here and a package
// under runtime/models.
package all

import (
	_ "github.com/qpack-go/qpack/runtime/models/gemma4"    // gemma4, gemma4_text
	_ "github.com/qpack-go/qpack/runtime/models/qwen3next" // qwen3_next, qwen3_5_moe
)
