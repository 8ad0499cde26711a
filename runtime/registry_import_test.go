package runtime_test

// The external tests load real models: register the architectures.
import _ "github.com/qpack-go/qpack/runtime/models/all"
