// Package runtime is the model runner's model-neutral core: Model, decode
// State and its Snapshots, ForwardOptions, the loaders of .qpack containers
// and MLX checkpoints (dense weights through Weights, routed experts
// through an ExpertSource), and the registry of architectures. Each
// architecture is a package under runtime/models that registers itself
// (runtime/models/all imports them all); the blocks they are written with
// are in runtime/nn. It reads containers and checkpoints and knows nothing
// of HTTP, repacking or verification. It defines the backend interface
// that package metal implements. docs/ARCHITECTURES.md explains how to add
// an architecture.
package runtime
