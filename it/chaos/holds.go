package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// holdWatch follows, from the members' status lines, the partitions held
// by a transaction their takeover did not end (PartitionStatus.Held), and
// how long any other partition folded nothing while one was held: a held
// partition must not stop the rest. Its methods run with chaos.mu held.
type holdWatch struct {
	// counting: gaps count now (the producer runs and every broker is
	// up); from: since when.
	counting bool
	from     time.Time

	folds     map[string]map[int32]int64 // per incarnation (m0#1): the fold counts last reported
	progress  map[int32]time.Time        // when a partition's fold count last grew
	heldSince map[int32]time.Time        // the partitions held now, since when
	holdStart time.Time                  // since when some partition is held; zero if none

	holds      []string // every hold that ended: partition, member, duration
	heldErrs   []string // the distinct errors of held partitions, the first few
	heldMax    time.Duration
	gap        time.Duration // the longest time an unheld partition folded nothing during a hold
	gapWhere   string
	partitions int32
}

func (w *holdWatch) reset(partitions int32) {
	*w = holdWatch{partitions: partitions, folds: map[string]map[int32]int64{}, progress: map[int32]time.Time{},
		heldSince: map[int32]time.Time{}}
}

// count starts (on) or stops counting gaps: they count while the producer
// runs and no broker node is down, from the moment they start.
func (w *holdWatch) count(on bool) {
	w.counting, w.from = on, time.Now()
}

// observe takes member p's status line ev.
func (w *holdWatch) observe(c *chaos, p *proc, ev event) {
	if w.folds == nil {
		return
	}
	now := time.Now()
	inc := fmt.Sprintf("%s#%d", p.name, p.inc)
	prev := w.folds[inc]
	for part, n := range ev.Folds {
		if n > prev[part] {
			w.progress[part] = now
		}
	}
	w.folds[inc] = ev.Folds

	held := map[int32]string{}
	for _, q := range c.procs {
		if exited(q) {
			continue
		}
		for _, part := range q.status.Held {
			held[part] = fmt.Sprintf("%s#%d", q.name, q.inc)
		}
	}
	for part, who := range held {
		if _, ok := w.heldSince[part]; !ok {
			w.heldSince[part] = now
			if ev.HeldErr != "" && !slices.Contains(w.heldErrs, ev.HeldErr) && len(w.heldErrs) < 5 {
				w.heldErrs = append(w.heldErrs, ev.HeldErr)
			}
			if c.verbose {
				c.logf("  p%d held on %s: %s", part, who, ev.HeldErr)
			}
		}
	}
	for part, since := range w.heldSince {
		if _, ok := held[part]; !ok {
			d := now.Sub(since)
			w.heldMax = max(w.heldMax, d)
			w.holds = append(w.holds, fmt.Sprintf("p%d held %.1fs", part, d.Seconds()))
			delete(w.heldSince, part)
		}
	}
	if len(held) == 0 {
		w.holdStart = time.Time{}
		return
	}
	if w.holdStart.IsZero() {
		w.holdStart = now
	}
	if !w.counting {
		return
	}
	for part := range w.partitions {
		if _, ok := held[part]; ok {
			continue
		}
		from := w.holdStart
		if w.from.After(from) {
			from = w.from
		}
		if w.progress[part].After(from) {
			from = w.progress[part]
		}
		if d := now.Sub(from); d > w.gap {
			w.gap = d
			w.gapWhere = fmt.Sprintf("p%d (while %d partitions were held)", part, len(held))
		}
	}
}

// finish ends the holds still on at the end of the mode.
func (w *holdWatch) finish() {
	now := time.Now()
	for part, since := range w.heldSince {
		d := now.Sub(since)
		w.heldMax = max(w.heldMax, d)
		w.holds = append(w.holds, fmt.Sprintf("p%d held %.1fs, still at the end", part, d.Seconds()))
	}
	slices.Sort(w.holds)
}

// The store's log lines that say a transaction was forgotten by its
// coordinator (a hanging transaction), by kind.
var hangLines = []struct{ kind, msg string }{
	{"aborted", "aborted a hanging transaction"},
	{"takeover-left-open", "found a transaction of its own lineage left open"},
	{"recovery-held", "recovery is held by a hanging transaction"},
}

// scanHangLogs counts the hanging-transaction lines in the members' logs
// in dir and returns the first few.
func scanHangLogs(dir string, members int) (map[string]int, []string, error) {
	counts := map[string]int{}
	var examples []string
	for i := range members {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("m%d.log", i)))
		if err != nil {
			return counts, examples, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			for _, h := range hangLines {
				if strings.Contains(line, h.msg) {
					counts[h.kind]++
					if len(examples) < 6 {
						examples = append(examples, fmt.Sprintf("m%d.log: %s", i, line))
					}
				}
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return counts, examples, err
		}
	}
	return counts, examples, nil
}
