package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// report is the run's report: stdout, and -report FILE as JSON.
type report struct {
	Seed           uint64        `json:"seed"`
	Brokers        string        `json:"brokers"`
	Members        int           `json:"members"`
	Partitions     int           `json:"partitions"`
	Keys           int           `json:"keys"`
	Rate           int           `json:"rate"`
	Schedule       []string      `json:"schedule"`
	Modes          []*modeReport `json:"modes"`
	ElapsedSeconds float64       `json:"elapsed_seconds"`
	Verdict        string        `json:"verdict"`
}

// modeReport is one mode's figures and findings.
type modeReport struct {
	Mode  string `json:"mode"`
	Topic string `json:"topic"`

	EventsIn           int64 `json:"events_in"` // input records (read back)
	Produced           int64 `json:"produced_acked"`
	ProduceErrors      int64 `json:"produce_errors"`
	InputSeqDuplicates int   `json:"input_seq_duplicates"`

	Faults               map[string]int    `json:"faults"`
	FaultLog             []faultRecord     `json:"fault_log"`
	RecoverMaxSeconds    float64           `json:"recover_max_seconds"`
	RecoverMedianSeconds float64           `json:"recover_median_seconds"`
	RecoverByKind        map[string]string `json:"recover_by_kind"` // median / max
	QuietSeconds         float64           `json:"quiet_seconds"`
	MemberFailures       []string          `json:"member_failures,omitempty"`

	// (1) state
	Keys          int      `json:"keys"`
	KeysWrong     int      `json:"keys_wrong"`
	LostEvents    int64    `json:"lost_events"`
	DoubledEvents int64    `json:"doubled_events"`
	WrongExamples []string `json:"wrong_examples,omitempty"`
	// (2) outputs
	OutputsRead    int64 `json:"outputs_read"`
	OutputsMissing int64 `json:"outputs_missing"`
	// MissingExamples are the first inputs (partition/offset) without an
	// output.
	MissingExamples  []string `json:"missing_examples,omitempty"`
	OutputDuplicates int64    `json:"output_duplicates"`
	InputsDuplicated int64    `json:"inputs_with_duplicate_outputs"`
	OutputsForeign   int      `json:"outputs_foreign"`
	// (2b) the concurrent read_committed consumer
	TailChecked    bool     `json:"concurrent_checked"`
	TailRead       int64    `json:"concurrent_outputs_read"`
	TailMissing    int64    `json:"concurrent_missing"`
	TailDuplicates int64    `json:"concurrent_duplicates"`
	TailInputsDup  int64    `json:"concurrent_inputs_duplicated"`
	TailForeign    int      `json:"concurrent_foreign"`
	TailDiffering  int64    `json:"concurrent_inputs_differing"`
	TailDiffers    []string `json:"concurrent_differ_examples,omitempty"`
	// (3) snapshots' order
	SnapshotsCommitted     int64    `json:"snapshots_committed"`
	SnapshotsWritten       int64    `json:"snapshots_written_uncommitted_view"`
	StaleOverwrites        int      `json:"stale_overwrites"`
	StaleExamples          []string `json:"stale_examples,omitempty"`
	UncommittedRegressions int      `json:"uncommitted_regressions_info"`
	// (4) transactions
	HangingChecked []int32  `json:"hanging_checked_brokers"`
	Hanging        []string `json:"hanging,omitempty"`
	OpenAtEnd      []string `json:"open_at_end,omitempty"`
	ReadIncomplete []string `json:"read_incomplete,omitempty"`
	// Hanging transactions met during the run: the store's log lines by
	// kind (aborted, takeover-left-open, recovery-held), and the holds
	// the members' status showed (PartitionStatus.Held). Hang: one of
	// those lines, or a held partition's error naming a hanging
	// transaction.
	Hang            bool           `json:"hang"`
	HangLogs        map[string]int `json:"hang_logs,omitempty"`
	HangLogExamples []string       `json:"hang_log_examples,omitempty"`
	Holds           []string       `json:"holds,omitempty"`
	HeldErrors      []string       `json:"held_errors,omitempty"`
	HeldMaxSeconds  float64        `json:"held_max_seconds"`
	// The longest time a partition that was not held folded nothing while
	// one was (the producer running and every broker up), and which.
	UnheldGapSeconds float64 `json:"unheld_gap_seconds"`
	UnheldGapWhere   string  `json:"unheld_gap_where,omitempty"`
	// (5) offsets
	OffsetsAtEnd   bool     `json:"offsets_at_end"`
	OffsetProblems []string `json:"offset_problems,omitempty"`

	Problems []string `json:"problems,omitempty"`
	Verdict  string   `json:"verdict"`
}

// abort records the error that cut the mode short (a failed wait):
// the recovery figures so far, and a failing verdict.
func (m *modeReport) abort(err error) {
	m.recovery()
	m.Problems = append(m.Problems, "aborted: "+err.Error())
	m.Problems = append(m.Problems, m.MemberFailures...)
	m.Verdict = "FAIL"
}

// recovery computes the recovery figures.
func (m *modeReport) recovery() {
	var all []float64
	byKind := map[string][]float64{}
	for _, f := range m.FaultLog {
		if f.RecoverSeconds > 0 {
			all = append(all, f.RecoverSeconds)
			byKind[f.Kind] = append(byKind[f.Kind], f.RecoverSeconds)
		}
	}
	m.RecoverMedianSeconds, m.RecoverMaxSeconds = medMax(all)
	m.RecoverByKind = map[string]string{}
	for k, xs := range byKind {
		med, mx := medMax(xs)
		m.RecoverByKind[k] = fmt.Sprintf("%.1f / %.1f", med, mx)
	}
}

// finish computes the recovery figures and the verdict.
func (m *modeReport) finish() {
	m.recovery()
	for _, n := range m.HangLogs {
		m.Hang = m.Hang || n > 0
	}
	for _, e := range m.HeldErrors {
		m.Hang = m.Hang || strings.Contains(e, "hanging") || strings.Contains(e, "left open")
	}
	var why []string
	if m.LostEvents > 0 || m.KeysWrong > 0 {
		why = append(why, fmt.Sprintf("(1) %d keys wrong: %d events lost, %d doubled", m.KeysWrong, m.LostEvents, m.DoubledEvents))
	}
	if m.OutputsMissing > 0 {
		why = append(why, fmt.Sprintf("(2) %d inputs without an output", m.OutputsMissing))
	}
	if m.Mode == "eos" && m.OutputDuplicates > 0 {
		why = append(why, fmt.Sprintf("(2) %d duplicate outputs read_committed under eos", m.OutputDuplicates))
	}
	if m.OutputsForeign > 0 {
		why = append(why, fmt.Sprintf("(2) %d outputs that name no input", m.OutputsForeign))
	}
	if !m.TailChecked {
		why = append(why, "(2b) the concurrent read_committed consumer was not checked")
	}
	if m.TailMissing > 0 || m.TailForeign > 0 || m.TailDiffering > 0 || m.Mode == "eos" && m.TailDuplicates > 0 {
		why = append(why, fmt.Sprintf("(2b) the concurrent read_committed consumer: %d inputs missing, %d duplicates, %d foreign, %d inputs seen otherwise than after the run",
			m.TailMissing, m.TailDuplicates, m.TailForeign, m.TailDiffering))
	}
	if m.StaleOverwrites > 0 {
		why = append(why, fmt.Sprintf("(3) %d stale overwrites", m.StaleOverwrites))
	}
	if len(m.Hanging) > 0 {
		why = append(why, fmt.Sprintf("(4) %d hanging transactions", len(m.Hanging)))
	}
	if len(m.OpenAtEnd) > 0 {
		why = append(why, fmt.Sprintf("(4) %d partitions with a transaction open at the end", len(m.OpenAtEnd)))
	}
	if !m.OffsetsAtEnd {
		why = append(why, "(5) committed offsets not at the input's end")
	}
	if len(m.MemberFailures) > 0 {
		why = append(why, fmt.Sprintf("%d member processes died on their own", len(m.MemberFailures)))
	}
	m.Problems = append(m.Problems, why...)
	m.Verdict = "pass"
	if len(m.Problems) > 0 {
		m.Verdict = "FAIL"
	}
}

func medMax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return med, s[len(s)-1]
}

func (r *report) finish(elapsed time.Duration) {
	r.ElapsedSeconds = elapsed.Seconds()
	r.Verdict = "pass"
	if len(r.Modes) == 0 {
		r.Verdict = "FAIL"
	}
	for _, m := range r.Modes {
		if m.Verdict != "pass" {
			r.Verdict = "FAIL"
		}
	}
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nchaos report: seed %d, %d members, %d partitions, %d keys, %d records/s, %.0fs\n",
		r.Seed, r.Members, r.Partitions, r.Keys, r.Rate, r.ElapsedSeconds)
	for _, m := range r.Modes {
		fmt.Fprintf(w, "\n── mode %s (%s) ──\n", m.Mode, m.Topic)
		fmt.Fprintf(w, "  events in                      %d (producer acked %d, errors %d, duplicate sequence numbers %d)\n",
			m.EventsIn, m.Produced, m.ProduceErrors, m.InputSeqDuplicates)
		var kinds []string
		total := 0
		for _, k := range faultKinds {
			if n := m.Faults[k]; n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
				total += n
			}
		}
		fmt.Fprintf(w, "  faults injected                %d: %s\n", total, strings.Join(kinds, ", "))
		fmt.Fprintf(w, "  time to recover                median %.1fs, max %.1fs\n", m.RecoverMedianSeconds, m.RecoverMaxSeconds)
		for _, k := range faultKinds {
			if v, ok := m.RecoverByKind[k]; ok {
				fmt.Fprintf(w, "    %-28s median / max %s s\n", k, v)
			}
		}
		fmt.Fprintf(w, "  quiet after the producer       %.1fs\n", m.QuietSeconds)
		fmt.Fprintf(w, "  (1) keys exact                 %d of %d (events lost %d, doubled %d)\n", m.Keys-m.KeysWrong, m.Keys, m.LostEvents, m.DoubledEvents)
		for _, e := range m.WrongExamples {
			fmt.Fprintf(w, "        %s\n", e)
		}
		fmt.Fprintf(w, "  (2) outputs read_committed     %d for %d inputs: missing %d, duplicates %d (over %d inputs)\n",
			m.OutputsRead, m.EventsIn, m.OutputsMissing, m.OutputDuplicates, m.InputsDuplicated)
		if len(m.MissingExamples) > 0 {
			fmt.Fprintf(w, "        the first inputs without an output: %s\n", strings.Join(m.MissingExamples, " "))
		}
		fmt.Fprintf(w, "  (2b) concurrent read_committed %d outputs read during the run: missing %d, duplicates %d (over %d inputs), foreign %d, inputs differing from (2) %d\n",
			m.TailRead, m.TailMissing, m.TailDuplicates, m.TailInputsDup, m.TailForeign, m.TailDiffering)
		for _, e := range m.TailDiffers {
			fmt.Fprintf(w, "        %s\n", e)
		}
		fmt.Fprintf(w, "  (3) stale overwrites           %d (snapshots committed %d; read_uncommitted %d, regressions there %d: info)\n",
			m.StaleOverwrites, m.SnapshotsCommitted, m.SnapshotsWritten, m.UncommittedRegressions)
		for _, e := range m.StaleExamples {
			fmt.Fprintf(w, "        %s\n", e)
		}
		fmt.Fprintf(w, "  (4) hanging transactions       %d (find-hanging on brokers %v); open at the end %d\n", len(m.Hanging), m.HangingChecked, len(m.OpenAtEnd))
		for _, e := range append(slices.Clone(m.Hanging), m.OpenAtEnd...) {
			fmt.Fprintf(w, "        %s\n", e)
		}
		fmt.Fprintf(w, "  (5) committed offsets at end   %v\n", m.OffsetsAtEnd)
		fmt.Fprintf(w, "  hanging transaction met        %v (store log lines %v)\n", m.Hang, m.HangLogs)
		for _, e := range m.HangLogExamples {
			fmt.Fprintf(w, "        %s\n", e)
		}
		fmt.Fprintf(w, "  holds                          %d, longest %.1fs; unheld partitions folded nothing for at most %.1fs during a hold %s\n",
			len(m.Holds), m.HeldMaxSeconds, m.UnheldGapSeconds, m.UnheldGapWhere)
		for _, e := range m.Holds {
			fmt.Fprintf(w, "        %s\n", e)
		}
		for _, e := range m.HeldErrors {
			fmt.Fprintf(w, "        held: %s\n", e)
		}
		for _, f := range m.MemberFailures {
			fmt.Fprintf(w, "  member failure: %s\n", f)
		}
		for _, p := range m.Problems {
			fmt.Fprintf(w, "  problem: %s\n", p)
		}
		fmt.Fprintf(w, "  verdict                        %s\n", m.Verdict)
		fmt.Fprintf(w, "  faults:\n")
		for _, f := range m.FaultLog {
			fmt.Fprintf(w, "    %2d %-44s %-8s %6.1fs%s\n", f.Index, f.Fault, f.Target, f.RecoverSeconds, f.Detail)
		}
	}
	fmt.Fprintf(w, "\nverdict: %s (seed %d)\n", r.Verdict, r.Seed)
}
