package runtime

// ExpertPrefetcher is an optional extension of ExpertSource. Before the
// forward pass requests the routed experts of a layer for a chunk, it calls
// Prefetch once with all of them (ascending, each once: the union of the
// chunk's routed experts); it then computes the shared expert and only then
// calls Expert for each of them in the same order. A source can start its
// reads in Prefetch so that they overlap the shared-expert compute. Prefetch
// must not block on I/O; errors surface from Expert.
type ExpertPrefetcher interface {
	Prefetch(layer int, experts []int)
}
