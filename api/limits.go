package api

// Limits are the limits s names, by their JSON names (Fields of a kind
// with a bound: times, sizes, counts, CPUs), without those it leaves at
// 0: what a request asked, or, of its spec WithDefaults, what it got.
func Limits(s *Spec) map[string]any {
	m := map[string]any{}
	for _, f := range Fields {
		switch f.Kind {
		case Duration, Size, Count:
			if v := f.value(s).Int(); v != 0 {
				m[f.JSON] = v
			}
		case CPUs:
			if v := f.value(s).Float(); v != 0 {
				m[f.JSON] = v
			}
		}
	}
	return m
}
