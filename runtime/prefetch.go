package runtime

import "github.com/qpack-go/qpack/runtime/nn"

// ExpertPrefetcher is an optional extension of ExpertSource: the forward
// pass announces each layer's experts for a chunk before reading them (see
// nn.ExpertPrefetcher for the protocol).
type ExpertPrefetcher = nn.ExpertPrefetcher

// ExpertSpeculator is an optional extension of ExpertPrefetcher: guesses
// at a layer's experts before its mixer runs (see nn.ExpertSpeculator).
type ExpertSpeculator = nn.ExpertSpeculator
