package bench

import "math/rand/v2"

// order is the bench's running order. Each round of the latency
// variants, and each set of throughput blocks, runs in a fresh random
// permutation, so that no variant always follows another: a variant that
// always runs right after one that leaves asynchronous kernel work
// behind (a service's deferred teardown, a freed network namespace) pays
// for it in every round, and a fixed rotation hides that in the ratios.
// One seed makes the whole order; the results print it, and --seed
// repeats it.
type order struct {
	seed uint64
	rng  *rand.Rand
}

func newOrder(seed uint64) *order {
	return &order{seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// next is the order of the next round of n variants: a permutation of
// 0..n-1.
func (o *order) next(n int) []int { return o.rng.Perm(n) }
