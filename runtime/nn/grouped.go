package nn

// ExpertGrouper is implemented by a Device that can run a chunk's routed
// experts as grouped products: every expert's gate and up products in one
// launch, the GLU in one, every expert's down product in one, instead of a
// few launches per expert (a prefill chunk uses most of a layer's
// experts, each on a few of its tokens). MoE.Run uses it when the device
// says the chunk is worth it: it then hands the device every expert the
// chunk uses first (CachedExpert or Expert, each source buffer released as
// soon as Expert returns: such a device copies an expert before Expert
// returns), and queues them all with one GroupExperts.
type ExpertGrouper interface {
	// GroupsExperts reports whether GroupExperts may take a chunk of T
	// tokens of K experts each (the device gains from grouping it).
	GroupsExperts(T, K int) bool
	// GroupExperts queues, for every slot s = t·K + j of g, row s of
	// g.Res = expert(x_t) = down(act(gate·x_t)·up·x_t) of the expert
	// g.Mats[i] whose slots hold s, and reports whether it did; false
	// queues nothing (shapes or formats its kernels do not take), and the
	// caller runs the experts one by one with the same Mats.
	GroupExperts(g ExpertGroup) bool
}

// ExpertGroup is a chunk's routed experts for ExpertGrouper.GroupExperts.
type ExpertGroup struct {
	X   Tensor // the experts' input [T, H]
	Res Tensor // the outputs [T·K, H], row s for slot s
	T   int
	H   int
	K   int
	Act Activation
	// Mats are the chunk's experts (the device's, from Expert or
	// CachedExpert); expert i serves slots Slots[First[i]:First[i+1]]
	// (ascending), each slot of [0, T·K) exactly once over all i.
	Mats  []ExpertMats
	First []int
	Slots []int
}
