package props

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/internal/world"
)

// The scenario language reads back every step it writes: for each
// world's vocabulary, ParseStep(s.String()) is s.
func TestEveryStepParsesBack(t *testing.T) {
	for _, cfg := range []world.Config{{}, {Timers: true}, {WarmRestarts: true}, {Standby: true}, {Standby: true, WarmRestarts: true}, {Tables: true}} {
		cfg := cfg.WithDefaults()
		rapid.Check(t, func(t *rapid.T) {
			s := StepGen(cfg).Draw(t, "step")
			got, err := world.ParseStep(s.String())
			if err != nil {
				t.Fatal(err)
			}
			if got != s {
				t.Fatalf("%q parses as %#v, want %#v", s.String(), got, s)
			}
		})
	}
}

// The steps StepGen does not draw parse back too.
func TestMacroStepsParseBack(t *testing.T) {
	for _, s := range []world.Step{{Kind: world.PollFirst, Member: 1}, {Kind: world.Query, Member: 2, Key: "b"}, {Kind: world.ReadView}} {
		got, err := world.ParseStep(s.String())
		if err != nil || got != s {
			t.Errorf("%q parses as %#v (%v), want %#v", s.String(), got, err, s)
		}
	}
}

// What is not a step is refused, naming the line.
func TestParseStepRefusesWhatIsNoStep(t *testing.T) {
	for _, line := range []string{"", "poll", "poll 0", "poll m", "produce a", "produce a=0", "produce a=7", "produce =+1",
		"advance", "advance -1s", "advance soon", "foreign-open 1", "compact", "table-end maybe", "table-put a=-1", "dance m0",
		"query", "query m0", "query a", "query m0 a=1", "query 0 a", "read-view m0"} {
		if s, err := world.ParseStep(line); err == nil {
			t.Errorf("%q parsed as %v, want an error", line, s)
		}
	}
}
