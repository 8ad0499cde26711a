package expertcache

// Memory returns the memory available to a new allocation and the
// machine's total, in bytes (0 where unknown): MemAvailable and MemTotal
// from /proc/meminfo on Linux; on darwin hw.memsize for the total and,
// lacking a cheap "available" figure, half of it.
func Memory() (available, total int64) { return memory() }

// MinBudget is the smallest default budget.
const MinBudget = 256 << 20

// DefaultBudget derives an expert cache budget from the memory available:
// half of what is left after the dense weights (denseBytes), at least
// MinBudget, at most allExperts (the bytes of every expert: more would
// never be used; 0 means no cap).
func DefaultBudget(denseBytes, allExperts int64) int64 {
	avail, _ := Memory()
	b := int64(MinBudget)
	if avail > 0 {
		b = max(b, (avail-denseBytes)/2)
	}
	if allExperts > 0 {
		b = min(b, allExperts)
	}
	return b
}
