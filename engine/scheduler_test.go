package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cockroachdb/datadriven"

	"github.com/snapfence/snapfence/internal/kafkatopic"
	"github.com/snapfence/snapfence/store"
)

// The scheduler's tests are scripts under testdata/scheduler, one command
// a step, each followed by what the scheduler answered: the actions it
// asked for ("do: ...") and every partition's record after the step.
// Rewrite them after an intended change with
//
//	go test ./engine -run TestSchedulerScripts -rewrite
//
// and review the diff. The commands:
//
//	config [commit=D] [persist=D] [tick=D] [no-flush-on-revoke] [unstable-timeout=D] [skip-poison]
//	                            a new scheduler at time 0 (defaults: commit and
//	                            persist 1m, no tick, 3m); persist=0: none
//	poll-start at=D             a poll starts; answers how long it may wait
//	polled at=D [dead]          the poll returned (dead: its records are not folded)
//	assigned|revoked|lost pN... a rebalance callback
//	acquired pN at=D [err=E]    a takeover of a start action ended
//	recovered pN [at=D] [assigned=N]
//	                            a recovery ended well at committed offset N
//	                            (default 0): a new flow pN#k runs
//	failed pN cause=C err=E [at=D]
//	                            a call failed (C: acquire, recover, setup, fold,
//	                            tick, write, batch, emit)
//	poisoned pN                 a fold failed on a record (a *FoldError)
//	timers at=D                 the poll's records are folded
//	close                       the runner closes
//
// Errors E: fenced, io, unstable, corrupt, canceled, fold, state, table,
// missing-topic, producer-fenced (as member m of group g in generation 1),
// producer-fenced-gen2.
func TestSchedulerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scheduler", func(t *testing.T, path string) {
		h := &schedulerHarness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := h.step(d)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return out
		})
	})
}

// testFlow stands for a runtime's flow: the scheduler only holds it.
type testFlow struct{ name string }

type schedulerHarness struct {
	s      *scheduler[*testFlow]
	starts map[store.TopicPartition]int
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *schedulerHarness) step(d *datadriven.TestData) (string, error) {
	if d.Cmd != "config" && h.s == nil {
		return "", errors.New("config first")
	}
	args := map[string]string{}
	var tps []store.TopicPartition
	for _, a := range d.CmdArgs {
		if strings.HasPrefix(a.Key, "p") && len(a.Vals) == 0 {
			n, err := strconv.Atoi(a.Key[1:])
			if err == nil {
				tps = append(tps, store.TopicPartition{Topic: "in", Partition: int32(n)})
				continue
			}
		}
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	dur := func(k, def string) (time.Duration, error) {
		v, ok := args[k]
		if !ok {
			v = def
		}
		return time.ParseDuration(v)
	}
	at, err := dur("at", "0s")
	if err != nil {
		return "", err
	}
	now := epoch.Add(at)
	one := func() (store.TopicPartition, error) {
		if len(tps) != 1 {
			return store.TopicPartition{}, fmt.Errorf("%s takes one partition", d.Cmd)
		}
		return tps[0], nil
	}
	var acts []action[*testFlow]
	var b strings.Builder
	switch d.Cmd {
	case "config":
		var cfg schedulerConfig
		if cfg.commitInterval, err = dur("commit", "1m"); err != nil {
			return "", err
		}
		if cfg.persistInterval, err = dur("persist", "1m"); err != nil {
			return "", err
		}
		if cfg.tickInterval, err = dur("tick", "0s"); err != nil {
			return "", err
		}
		if cfg.unstableTimeout, err = dur("unstable-timeout", "3m"); err != nil {
			return "", err
		}
		if cfg.standbyInterval, err = dur("standby", "0s"); err != nil {
			return "", err
		}
		_, noFlush := args["no-flush-on-revoke"]
		cfg.flushOnRevoke = !noFlush
		_, cfg.skipPoison = args["skip-poison"]
		_, cfg.discardUndecodable = args["discard-undecodable"]
		h.s = newScheduler[*testFlow](cfg, epoch)
		h.starts = map[store.TopicPartition]int{}
	case "poll-start":
		h.s.pollStarting()
		w, err := scriptWakeups(args, dur)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "wait %s\n", h.s.pollWait(now, w))
	case "polled":
		_, dead := args["dead"]
		acts = h.s.polled(now, !dead)
	case "assigned":
		acts = h.s.assigned(tps)
	case "revoked":
		acts = h.s.revoked(tps)
	case "lost":
		acts = h.s.lost(tps)
	case "close":
		acts = h.s.closing()
	case "acquired":
		tp, err := one()
		if err != nil {
			return "", err
		}
		var proceed bool
		proceed, acts = h.s.acquired(tp, namedError(args["err"], tp), now)
		if proceed {
			b.WriteString("recover next\n")
		}
	case "recovered":
		tp, err := one()
		if err != nil {
			return "", err
		}
		h.starts[tp]++
		assigned, err := strconv.ParseInt(cmp.Or(args["assigned"], "0"), 10, 64)
		if err != nil {
			return "", err
		}
		acts = h.s.recovered(tp, &testFlow{name: fmt.Sprintf("%s#%d", short(tp), h.starts[tp])}, assigned, now)
	case "failed":
		tp, err := one()
		if err != nil {
			return "", err
		}
		c, ok := map[string]cause{"acquire": causeAcquire, "recover": causeRecover, "setup": causeSetup,
			"fold": causeFold, "tick": causeTick, "write": causeWrite, "batch": causeBatch, "emit": causeEmit}[args["cause"]]
		if !ok {
			return "", fmt.Errorf("cause %q", args["cause"])
		}
		acts = h.s.failed(tp, c, namedError(args["err"], tp), now)
	case "poisoned":
		tp, err := one()
		if err != nil {
			return "", err
		}
		var skip bool
		skip, acts = h.s.poisoned(tp, namedError("fold", tp))
		if skip {
			b.WriteString("skip the record\n")
		}
	case "timers":
		acts = h.s.timers(now)
	case "replica":
		for _, tp := range tps {
			h.s.replicaAdded(tp)
		}
	case "replica-gone":
		for _, tp := range tps {
			h.s.replicaRemoved(tp)
		}
	case "standby-round":
		if !h.s.standbyDue(now) {
			b.WriteString("not due\n")
			break
		}
		_, behind := args["behind"]
		h.s.standbyRoundEnded(now, behind)
		b.WriteString("round\n")
	case "poll-ended":
		fmt.Fprintf(&b, "backoff %s\n", h.s.pollEnded(namedError(args["err"], store.TopicPartition{})))
	case "flush-all":
		acts = h.s.flushRequested(true)
	case "persist":
		acts = h.s.flushRequested(false)
	default:
		return "", fmt.Errorf("unknown command %q", d.Cmd)
	}
	for _, a := range acts {
		fmt.Fprintf(&b, "do: %s\n", describe(a))
	}
	for _, tp := range sortedKeys(h.s.parts) {
		fmt.Fprintf(&b, "%s\n", describePartition(h.s.parts[tp]))
	}
	for _, tp := range sortedKeys(h.s.replicas) {
		fmt.Fprintf(&b, "%s: standby replica\n", short(tp))
	}
	if h.s.fatal != nil {
		fmt.Fprintf(&b, "fatal: %v\n", h.s.fatal)
	}
	return b.String(), nil
}

// scriptWakeups are poll-start's wake-ups: timer=D (every running flow's
// next processing-time timer, D after the epoch), busy (a store call in
// flight), recovering, and report=D (the next group report).
func scriptWakeups(args map[string]string, dur func(string, string) (time.Duration, error)) (wakeups[*testFlow], error) {
	var w wakeups[*testFlow]
	if _, ok := args["timer"]; ok {
		d, err := dur("timer", "")
		if err != nil {
			return w, err
		}
		w.timer = func(*testFlow) (int64, bool) { return epoch.Add(d).UnixMilli(), true }
	}
	if _, ok := args["busy"]; ok {
		w.busy = func(*testFlow) bool { return true }
	}
	_, w.recovering = args["recovering"]
	if _, ok := args["report"]; ok {
		d, err := dur("report", "")
		if err != nil {
			return w, err
		}
		w.report = epoch.Add(d)
	}
	return w, nil
}

// namedError is the script's error E for tp ("": none).
func namedError(name string, tp store.TopicPartition) error {
	switch name {
	case "":
		return nil
	case "fenced":
		return fmt.Errorf("store: %s fenced: %w", tp, store.ErrFenced)
	case "io":
		return errors.New("broker unreachable")
	case "unstable":
		return fmt.Errorf("store: %s: %w", tp, store.ErrOffsetUnstable)
	case "corrupt":
		return fmt.Errorf("store: %s: %w", tp, store.ErrCorruptRecord)
	case "canceled":
		return context.Canceled
	case "fold":
		return &FoldError{Input: tp, Offset: 7, Key: []byte("k"), Err: errors.New("bad op")}
	case "state":
		return &RecoveredStateError{Input: tp, Key: []byte("k"), Offset: 7, Err: errors.New("bad state")}
	case "producer-fenced", "producer-fenced-gen2":
		gen := int32(1)
		if name == "producer-fenced-gen2" {
			gen = 2
		}
		return &store.FencedError{Input: tp, Identity: store.GroupIdentity{Group: "g", MemberID: "m", Generation: gen},
			TransactionalID: store.TransactionalID("app", tp), Reason: errors.New("PRODUCER_FENCED")}
	case "too-large":
		// As the Kafka emitter marks a refusal for good.
		return &EmitError{Failed: 1, Total: 1, Topic: "out", Partition: 0, Key: []byte("k"), Err: kafkatopic.MarkRefused(kerr.MessageTooLarge)}
	case "table":
		return &TableError{Input: tp, Table: "prices", Err: errors.New("not caught up within Config.TableTimeout (3m0s)")}
	case "missing-topic":
		return &store.ConfigError{Subject: `topic "in-snapshots"`, Problem: "does not exist", Fix: "create it"}
	}
	return fmt.Errorf("unknown error %q", name)
}

func short(tp store.TopicPartition) string { return fmt.Sprintf("p%d", tp.Partition) }

func describe(a action[*testFlow]) string {
	var b strings.Builder
	switch a.kind {
	case actStart:
		b.WriteString("start")
		for _, tp := range a.tps {
			b.WriteString(" " + short(tp))
		}
		if a.seek {
			b.WriteString(" (seek)")
		}
		if a.discard {
			b.WriteString(" (discard undecodable states)")
		}
	case actCancel:
		fmt.Fprintf(&b, "cancel the recovery of %s", short(a.tp))
	case actTeardown:
		fmt.Fprintf(&b, "teardown %s", a.flow.name)
		if a.flush {
			b.WriteString(" (flush and commit first)")
		}
	case actStop:
		fmt.Fprintf(&b, "stop %s", short(a.tp))
		if a.flow != nil {
			fmt.Fprintf(&b, ", tear down %s", a.flow.name)
		}
		if a.commit {
			b.WriteString(" (commit first)")
		}
		fmt.Fprintf(&b, ": %v [%s]", a.err, a.class)
		if a.fatal && a.first {
			b.WriteString(" (fatal, first)")
		} else if a.fatal {
			b.WriteString(" (fatal)")
		} else if !a.retry.IsZero() {
			fmt.Fprintf(&b, " (restart at %s)", a.retry.Sub(epoch))
		}
	case actHold:
		fmt.Fprintf(&b, "hold %s", short(a.tp))
		if a.first {
			b.WriteString(" (warn)")
		}
	case actTick:
		fmt.Fprintf(&b, "tick at %s", a.at.Sub(epoch))
	case actPersist:
		b.WriteString("persist")
	case actCommit:
		b.WriteString("commit")
	case actDrain:
		b.WriteString("drain")
	case actPromote:
		b.WriteString("promote " + short(a.tp) + "'s standby replica: its copy is the start's base")
	}
	return b.String()
}

func describePartition(p *partition[*testFlow]) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", short(p.tp), p.phase)
	if p.flow != nil {
		fmt.Fprintf(&b, " %s", p.flow.name)
	}
	if p.held != nil {
		fmt.Fprintf(&b, " (held since %s, retry at %s)", p.held.since.Sub(epoch), p.held.retry.Sub(epoch))
	}
	if p.phase == phaseWaiting && p.held == nil && !p.retry.IsZero() {
		fmt.Fprintf(&b, " (restart %d at %s)", p.restarts, p.retry.Sub(epoch))
	}
	if p.err != nil {
		fmt.Fprintf(&b, " [%v]", p.err)
	}
	return b.String()
}
