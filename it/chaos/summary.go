package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// summarizeReports prints one table of the runs whose -report files are
// given (make probe): per run and mode, whether a hanging transaction was
// met, the state, the outputs a read_committed reader saw twice or never,
// the hanging transactions left at the end, and the longest time an
// unheld partition folded nothing during a hold; then the totals.
func summarizeReports(w io.Writer, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("-summarize: no report files given")
	}
	fmt.Fprintf(w, "%-14s %-7s %-5s %-20s %-6s %-9s %-9s %-9s %-8s %-6s %-8s %-9s %s\n",
		"run", "verdict", "hang", "hang logs a/t/r", "holds", "exact", "dup-in", "missing", "dup-tail", "left", "open-end", "unheld-gap", "faults")
	var runs, hangs, exact, dupRuns, lost, left, pass int
	var maxGap float64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if len(r.Modes) == 0 {
			runs++
			fmt.Fprintf(w, "%-14s %-7s (no mode ran)\n", name, r.Verdict)
			continue
		}
		for _, m := range r.Modes {
			runs++
			if m.Verdict == "pass" {
				pass++
			}
			if m.Hang {
				hangs++
			}
			if m.KeysWrong == 0 && m.Keys > 0 {
				exact++
			}
			if m.InputsDuplicated > 0 || m.TailInputsDup > 0 {
				dupRuns++
			}
			if m.OutputsMissing > 0 || m.TailMissing > 0 {
				lost++
			}
			if len(m.Hanging) > 0 {
				left++
			}
			maxGap = max(maxGap, m.UnheldGapSeconds)
			var kinds []string
			for _, k := range faultKinds {
				if n := m.Faults[k]; n > 0 {
					kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
				}
			}
			exactS := fmt.Sprintf("%d/%d", m.Keys-m.KeysWrong, m.Keys)
			fmt.Fprintf(w, "%-14s %-7s %-5v %-20s %-6d %-9s %-9d %-9d %-8d %-6d %-8d %-10s %s\n",
				name, m.Verdict, m.Hang,
				fmt.Sprintf("%d/%d/%d", m.HangLogs["aborted"], m.HangLogs["takeover-left-open"], m.HangLogs["recovery-held"]),
				len(m.Holds), exactS, m.InputsDuplicated, m.OutputsMissing, m.TailInputsDup, len(m.Hanging), len(m.OpenAtEnd),
				fmt.Sprintf("%.1fs", m.UnheldGapSeconds), strings.Join(kinds, ", "))
		}
	}
	fmt.Fprintf(w, "\n%d runs: %d passed; %d met a hanging transaction; state exact in %d; outputs seen twice in %d, never in %d; "+
		"hanging transactions left in %d; longest unheld fold gap during a hold %.1fs\n",
		runs, pass, hangs, exact, dupRuns, lost, left, maxGap)
	fmt.Fprintln(w, "(hang logs a/t/r: the store's lines \"aborted a hanging transaction\", \"... found a transaction of its own lineage left open\", "+
		"\"recovery is held by a hanging transaction\"; dup-in: inputs whose outputs the verifier's read_committed read saw twice; "+
		"dup-tail: the same for the consumer that read throughout the run; left: find-hanging at the end)")
	return nil
}
