package bench

import (
	"math"
	"sort"
	"time"
)

// dist is the distribution of one measured quantity, in milliseconds
// (or in percent for relative errors; the caller says which).
type dist struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	Max    float64 `json:"max"`
}

// summarize describes xs; an empty xs gives a zero dist.
func summarize(xs []float64) dist {
	if len(xs) == 0 {
		return dist{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return dist{N: len(s), Min: s[0], Median: quantile(s, 0.5), P90: quantile(s, 0.9), Max: s[len(s)-1]}
}

// quantile of sorted xs, interpolating linearly between neighbours.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 1 {
		return sorted[0]
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// median of xs (0 for none).
func median(xs []float64) float64 { return summarize(xs).Median }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, or 0 when b is unknown.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
