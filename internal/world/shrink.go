package world

// Shrink removes steps from a failing scenario while fails still says the
// smaller one fails: chunks of half the steps first, then smaller chunks,
// down to single steps, until no removal keeps the failure. fails is
// called with a fresh slice each time and must run the steps in a fresh
// world.
//
// On the sim world (deterministic) the result replays exactly. On a world
// whose scheduling is not fixed (kfake), fails may say yes once and no the
// next time; the result is then a smaller scenario that failed at least
// once, which is still a counterexample to look at.
func Shrink(steps []Step, fails func([]Step) bool) []Step {
	for chunk := len(steps) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(steps); {
			cand := append(append([]Step{}, steps[:i]...), steps[i+chunk:]...)
			if fails(cand) {
				steps = cand
				continue
			}
			i += chunk
		}
	}
	return steps
}

// HasViolation reports whether vs has a violation of invariant.
func HasViolation(vs []Violation, invariant int) bool {
	for _, v := range vs {
		if v.Invariant == invariant {
			return true
		}
	}
	return false
}
