package bench

import (
	"slices"
	"testing"
)

// The order of every round is a permutation, the same seed gives the
// same rounds, and over many rounds every variant runs right after every
// other one, and first, about equally often (a rotation of one fixed
// list would put each after one variant only).
func TestOrderRounds(t *testing.T) {
	const n, rounds = 5, 4000
	a, b := newOrder(42), newOrder(42)
	follows := make([][]int, n+1) // follows[prev][v]; prev n: first in its round
	for i := range follows {
		follows[i] = make([]int, n)
	}
	for r := 0; r < rounds; r++ {
		p := a.next(n)
		if q := b.next(n); !slices.Equal(p, q) {
			t.Fatalf("round %d: the same seed gave %v and %v", r, p, q)
		}
		sorted := slices.Clone(p)
		slices.Sort(sorted)
		for i, v := range sorted {
			if v != i {
				t.Fatalf("round %d: %v is not a permutation of 0..%d", r, p, n-1)
			}
		}
		prev := n
		for _, v := range p {
			follows[prev][v]++
			prev = v
		}
	}
	// Within a round, v follows u (u != v) in rounds/n of the rounds on
	// average; a fair order keeps every pair within a quarter of that.
	want := rounds / n
	for u := 0; u <= n; u++ {
		for v := 0; v < n; v++ {
			if u == v {
				if follows[u][v] != 0 {
					t.Errorf("%d ran twice in one round", v)
				}
				continue
			}
			if c := follows[u][v]; c < want*3/4 || c > want*5/4 {
				t.Errorf("%d ran after %d in %d of %d rounds, want about %d", v, u, c, rounds, want)
			}
		}
	}
	if c := newOrder(43).next(n); slices.Equal(c, newOrder(42).next(n)) && slices.Equal(newOrder(43).next(8), newOrder(42).next(8)) {
		t.Errorf("seeds 42 and 43 gave the same first rounds")
	}
}
