package schedule

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/snapfence/snapfence/store"
)

// replicaStep runs a replica command of the scripts (see
// TestSchedulerScripts).
func (h *schedulerHarness) replicaStep(cmd string, tps []store.TopicPartition, args map[string]string, now time.Time, b *strings.Builder) error {
	if cmd == "replicas" {
		var cfg ReplicaConfig
		var err error
		for k, dst := range map[string]*time.Duration{"interval": &cfg.Interval, "retry": &cfg.Retry, "list": &cfg.ListEvery} {
			if v, ok := args[k]; ok {
				if *dst, err = time.ParseDuration(v); err != nil {
					return err
				}
			}
		}
		_, cfg.FailureEnds = args["failure-ends"]
		h.s, h.rs, h.name = nil, NewReplicas(cfg), "replica"
		return nil
	}
	if h.rs == nil {
		return fmt.Errorf("%s: no replicas (config standby=D, or replicas)", cmd)
	}
	switch cmd {
	case "replica":
		for _, tp := range tps {
			h.rs.Add(tp)
		}
	case "replica-gone":
		for _, tp := range tps {
			h.rs.Remove(tp)
		}
	case "list":
		if !h.rs.ListDue(now) {
			b.WriteString("listing not due\n")
			return nil
		}
		h.rs.Listed(now)
		b.WriteString("list\n")
	case "resume":
		h.rs.Resume()
	case "round":
		h.round(args, now, b)
	}
	return nil
}

// round runs a round, if one is due, as a caller of Replicas does.
func (h *schedulerHarness) round(args map[string]string, now time.Time, b *strings.Builder) {
	if !h.rs.RoundDue(now) {
		b.WriteString("not due\n")
		return
	}
	b.WriteString("round\n")
	behind := strings.Split(args["behind"], ",")
	fail := strings.Split(args["fail"], ",")
	for tp := range h.rs.All() {
		var err error
		if slices.Contains(fail, short(tp)) {
			err = fmt.Errorf("%s: broker unreachable", short(tp))
		}
		switch h.rs.Next(tp, now) {
		case StepOpen:
			fmt.Fprintf(b, "do: open %s\n", short(tp))
			h.rs.Opened(tp, err, now)
		case StepRead:
			fmt.Fprintf(b, "do: read %s\n", short(tp))
			h.rs.ReadEnded(tp, slices.Contains(behind, short(tp)), err, now)
		}
	}
	h.rs.RoundEnded(now)
}

// describeReplicas writes each replica's record, and the run's end.
func (h *schedulerHarness) describeReplicas(b *strings.Builder) {
	if h.rs == nil {
		return
	}
	for tp, r := range h.rs.All() {
		fmt.Fprintf(b, "%s: %s %s", short(tp), h.name, r.Phase())
		if r.Behind() {
			b.WriteString(", behind")
		}
		switch {
		case r.Err() != nil && r.RetryAt().IsZero():
			fmt.Fprintf(b, " [%v], opens again in the next run", r.Err())
		case r.Err() != nil:
			fmt.Fprintf(b, " [%v], opens again at %s", r.Err(), r.RetryAt().Sub(epoch))
		}
		b.WriteString("\n")
	}
	if h.rs.Err() != nil {
		fmt.Fprintf(b, "the run ends: %v\n", h.rs.Err())
	}
}
