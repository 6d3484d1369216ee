package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/snapfence/snapfence/internal/world"
)

// The golden corpus: the sim world's histories (the JSON lines -json
// writes) of every named scenario in each of its modes, kept whole under
// testdata/corpus/named, and of corpusSeeds seeded random scenarios per
// protocol and per engine configuration, kept as SHA-256 digests in
// testdata/corpus/random.sha256 (the histories would be ~60 MB). A change
// to the engine's runtime that is meant to keep its behaviour must keep
// every history byte for byte. To see a random history that moved, run its line's
// arguments (cmd/simulate -json FILE ARGS) at the corpus's commit and now,
// and diff. Rewrite with -update only for an intended change, and explain
// each difference in the commit.
const corpusSeeds = 500

// corpusRuns are the argument lists of the corpus's random histories.
func corpusRuns() [][]string {
	var runs [][]string
	for _, proto := range []string{"eager", "cooperative", "consumer"} {
		for seed := 1; seed <= corpusSeeds; seed++ {
			base := []string{"-protocol", proto, "-seed", fmt.Sprint(seed), "-steps", "40"}
			runs = append(runs,
				append(slices.Clone(base), "-mode", "transactional"),
				append(slices.Clone(base), "-mode", "plain"),
			)
			if seed <= corpusSeeds/5 {
				runs = append(runs, append(slices.Clone(base), "-mode", "transactional", "-outputs", "exactly-once"))
			}
		}
	}
	return runs
}

// simHistory runs the simulator with args and returns the JSON lines it
// writes; a run that cannot start fails the test (a run whose checks fail
// is history too).
func simHistory(t *testing.T, args []string) []byte {
	t.Helper()
	var out, errs bytes.Buffer
	code := simulate(context.Background(), append([]string{"-json", "-"}, args...), &out, &errs)
	if code == exitUsage {
		t.Fatalf("simulate %s: exit %d: %s", strings.Join(args, " "), code, errs.String())
	}
	return out.Bytes()
}

func TestSimHistoriesMatchTheGoldenCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "corpus")
	t.Run("named", func(t *testing.T) {
		for _, s := range world.Scenarios {
			var ms []string
			if s.Transactional != nil {
				ms = append(ms, "transactional")
			}
			if s.Plain != nil {
				ms = append(ms, "plain")
			}
			for _, m := range ms {
				got := simHistory(t, []string{"-scenario", s.Name, "-mode", m})
				file := filepath.Join(dir, "named", s.Name+"."+m+".jsonl")
				if *update {
					if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(file, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("the history of %s in %s mode moved from %s (diff it against cmd/simulate -json - -scenario %s -mode %s)", s.Name, m, file, s.Name, m)
				}
			}
		}
	})
	t.Run("random", func(t *testing.T) {
		runs := corpusRuns()
		digests := make([]string, len(runs))
		var wg sync.WaitGroup
		work := make(chan int)
		for range 4 {
			wg.Go(func() {
				for i := range work {
					sum := sha256.Sum256(simHistory(t, runs[i]))
					digests[i] = hex.EncodeToString(sum[:])
				}
			})
		}
		for i := range runs {
			work <- i
		}
		close(work)
		wg.Wait()
		file := filepath.Join(dir, "random.sha256")
		if *update {
			var b strings.Builder
			for i, args := range runs {
				fmt.Fprintf(&b, "%s  %s\n", digests[i], strings.Join(args, " "))
			}
			if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		want := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			digest, args, _ := strings.Cut(sc.Text(), "  ")
			want[args] = digest
		}
		if len(want) != len(runs) {
			t.Fatalf("%s has %d histories, the corpus %d", file, len(want), len(runs))
		}
		moved := 0
		for i, args := range runs {
			key := strings.Join(args, " ")
			if want[key] != digests[i] {
				moved++
				if moved <= 20 {
					t.Errorf("the history of %q moved", key)
				}
			}
		}
		if moved > 0 {
			t.Errorf("%d of %d random histories moved", moved, len(runs))
		}
	})
}
