package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/snapfence/snapfence/store"
)

// The scheduler's tests are scripts under testdata, one command
// a step, each followed by what the scheduler answered: the actions it
// asked for ("do: ...") and every partition's record after the step.
// Rewrite them after an intended change with
//
//	go test ./engine/internal/schedule -run TestSchedulerScripts -rewrite
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
//	poisoned pN                 a fold failed on a record (the runtime's fold error)
//	timers at=D                 the poll's records are folded
//	close                       the runner closes
//
// Replicas: a config's standby replicas (config standby=D [standby-retry=D]),
// or those of a reader without a group (a view):
//
//	replicas [interval=D] [retry=D] [list=D] [failure-ends]
//	                            a Replicas of its own at time 0, no scheduler
//	replica|replica-gone pN...  a replica added, removed
//	round at=D [behind=pN,..] [fail=pN,..]
//	                            a round if one is due: each replica's step done
//	                            (an open or read failing for fail, a read left
//	                            behind its log end for behind)
//	list at=D                   a listing if one is due
//	resume                      a new run (a view's Run or Step)
//
// Errors E: fenced, io, unstable, corrupt, canceled, fold, state, table,
// missing-topic, producer-fenced (as member m of group g in generation 1),
// producer-fenced-gen2.
func TestSchedulerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
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
	s *Scheduler[*testFlow]
	// rs is the replicas the replica commands drive: the scheduler's
	// standbys, or those of a reader without a group (replicas); name is
	// what their records are called.
	rs     *Replicas
	name   string
	starts map[store.TopicPartition]int
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *schedulerHarness) step(d *datadriven.TestData) (string, error) {
	if h.s == nil && !slices.Contains([]string{"config", "replicas", "replica", "replica-gone", "round", "list", "resume"}, d.Cmd) {
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
	var acts []Action[*testFlow]
	var b strings.Builder
	switch d.Cmd {
	case "config":
		var cfg Config
		if cfg.CommitInterval, err = dur("commit", "1m"); err != nil {
			return "", err
		}
		if cfg.PersistInterval, err = dur("persist", "1m"); err != nil {
			return "", err
		}
		if cfg.TickInterval, err = dur("tick", "0s"); err != nil {
			return "", err
		}
		if cfg.UnstableTimeout, err = dur("unstable-timeout", "3m"); err != nil {
			return "", err
		}
		if cfg.StandbyInterval, err = dur("standby", "0s"); err != nil {
			return "", err
		}
		_, noFlush := args["no-flush-on-revoke"]
		cfg.FlushOnRevoke = !noFlush
		_, cfg.SkipPoison = args["skip-poison"]
		_, cfg.DiscardUndecodable = args["discard-undecodable"]
		cfg.ReplaysFail, cfg.FoldError = replaysFail, scriptFoldError
		if cfg.StandbyRetry, err = dur("standby-retry", "30s"); err != nil {
			return "", err
		}
		h.s = New[*testFlow](cfg, epoch)
		h.rs, h.name = h.s.Standbys(), "standby replica"
		h.starts = map[store.TopicPartition]int{}
	case "poll-start":
		h.s.PollStarting()
		w, err := scriptWakeups(args, dur)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "wait %s\n", h.s.PollWait(now, w))
	case "polled":
		_, dead := args["dead"]
		acts = h.s.Polled(now, !dead)
	case "assigned":
		acts = h.s.Assigned(tps)
	case "revoked":
		acts = h.s.Revoked(tps)
	case "lost":
		acts = h.s.Lost(tps)
	case "close":
		acts = h.s.Closing()
	case "acquired":
		tp, err := one()
		if err != nil {
			return "", err
		}
		var proceed bool
		proceed, acts = h.s.Acquired(tp, namedError(args["err"], tp), now)
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
		acts = h.s.Recovered(tp, &testFlow{name: fmt.Sprintf("%s#%d", short(tp), h.starts[tp])}, assigned, now)
	case "failed":
		tp, err := one()
		if err != nil {
			return "", err
		}
		c, ok := map[string]Cause{"acquire": CauseAcquire, "recover": CauseRecover, "setup": CauseSetup,
			"fold": CauseFold, "tick": CauseTick, "write": CauseWrite, "batch": CauseBatch, "emit": CauseEmit}[args["cause"]]
		if !ok {
			return "", fmt.Errorf("cause %q", args["cause"])
		}
		acts = h.s.Failed(tp, c, namedError(args["err"], tp), now)
	case "poisoned":
		tp, err := one()
		if err != nil {
			return "", err
		}
		var skip bool
		skip, acts = h.s.Poisoned(tp, namedError("fold", tp))
		if skip {
			b.WriteString("skip the record\n")
		}
	case "timers":
		acts = h.s.Timers(now)
	case "replicas", "replica", "replica-gone", "round", "list", "resume":
		if err := h.replicaStep(d.Cmd, tps, args, now, &b); err != nil {
			return "", err
		}
	case "poll-ended":
		fmt.Fprintf(&b, "backoff %s\n", h.s.PollEnded(namedError(args["err"], store.TopicPartition{})))
	case "flush-all":
		acts = h.s.FlushRequested(true)
	case "persist":
		acts = h.s.FlushRequested(false)
	default:
		return "", fmt.Errorf("unknown command %q", d.Cmd)
	}
	for _, a := range acts {
		fmt.Fprintf(&b, "do: %s\n", describe(a))
	}
	if h.s == nil {
		h.describeReplicas(&b)
		return b.String(), nil
	}
	for _, tp := range sortedKeys(h.s.parts) {
		fmt.Fprintf(&b, "%s\n", describePartition(h.s.parts[tp]))
	}
	h.describeReplicas(&b)
	if h.s.fatal != nil {
		fmt.Fprintf(&b, "fatal: %v\n", h.s.fatal)
	}
	return b.String(), nil
}

// scriptWakeups are poll-start's wake-ups: timer=D (every running flow's
// next processing-time timer, D after the epoch), busy (a store call in
// flight), recovering, and report=D (the next group report).
func scriptWakeups(args map[string]string, dur func(string, string) (time.Duration, error)) (Wakeups[*testFlow], error) {
	var w Wakeups[*testFlow]
	if _, ok := args["timer"]; ok {
		d, err := dur("timer", "")
		if err != nil {
			return w, err
		}
		w.Timer = func(*testFlow) (int64, bool) { return epoch.Add(d).UnixMilli(), true }
	}
	if _, ok := args["busy"]; ok {
		w.Busy = func(*testFlow) bool { return true }
	}
	_, w.Recovering = args["recovering"]
	if _, ok := args["report"]; ok {
		d, err := dur("report", "")
		if err != nil {
			return w, err
		}
		w.Report = epoch.Add(d)
	}
	return w, nil
}

// namedError is the script's error E for tp ("": none). The runtime's
// error types (a fold's, an undecodable state's, an emit's, a table's)
// are the engine's; here scriptErrors stand for them, with their text.
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
		return &scriptError{msg: fmt.Sprintf("engine: fold of %s offset 7 key \"k\" failed: bad op", tp), replaysFail: true}
	case "state":
		return &scriptError{msg: fmt.Sprintf("engine: %s: the state of key \"k\" (input offset 7) does not decode: bad state; "+
			"deploy a Codec that reads the old encoding (engine.VersionedCodec)", tp), replaysFail: true}
	case "producer-fenced", "producer-fenced-gen2":
		gen := int32(1)
		if name == "producer-fenced-gen2" {
			gen = 2
		}
		return &store.FencedError{Input: tp, Identity: store.GroupIdentity{Group: "g", MemberID: "m", Generation: gen},
			TransactionalID: store.TransactionalID("app", tp), Reason: errors.New("PRODUCER_FENCED")}
	case "too-large":
		// As the Kafka emitter reports an output refused for good.
		return &scriptError{msg: `engine: emitter: 1 of 1 outputs not delivered; the first, to topic "out" partition 0 with key "k": ` +
			"MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept", err: store.ErrRecordRefused}
	case "table":
		return &scriptError{msg: fmt.Sprintf("engine: %s waits for table prices to catch up before it folds: not caught up within Config.TableTimeout (3m0s)", tp)}
	case "missing-topic":
		return &store.ConfigError{Subject: `topic "in-snapshots"`, Problem: "does not exist", Fix: "create it"}
	}
	return fmt.Errorf("unknown error %q", name)
}

// scriptError stands for an error of the runtime's: msg is its text, err
// what it wraps; replaysFail: a replay meets it again (Config.ReplaysFail),
// as a fold's or an undecodable state's.
type scriptError struct {
	msg         string
	err         error
	replaysFail bool
}

func (e *scriptError) Error() string { return e.msg }
func (e *scriptError) Unwrap() error { return e.err }

func replaysFail(err error) bool {
	se, ok := errors.AsType[*scriptError](err)
	return ok && se.replaysFail
}

// scriptFoldError is Config.FoldError: the fold error naming src of tp.
func scriptFoldError(tp store.TopicPartition, src Source, err error) error {
	return &scriptError{msg: fmt.Sprintf("engine: fold of %s offset %d key %q failed: %v", tp, src.Offset, src.Key, err), err: err, replaysFail: true}
}

func short(tp store.TopicPartition) string { return fmt.Sprintf("p%d", tp.Partition) }

func describe(a Action[*testFlow]) string {
	var b strings.Builder
	switch a.Kind {
	case ActStart:
		b.WriteString("start")
		for _, tp := range a.TPs {
			b.WriteString(" " + short(tp))
		}
		if a.Restart {
			b.WriteString(" (seek)")
		}
		if a.Discard {
			b.WriteString(" (discard undecodable states)")
		}
	case ActCancel:
		fmt.Fprintf(&b, "cancel the recovery of %s", short(a.TP))
	case ActTeardown:
		fmt.Fprintf(&b, "teardown %s", a.Flow.name)
		if a.Flush {
			b.WriteString(" (flush and commit first)")
		}
	case ActStop:
		fmt.Fprintf(&b, "stop %s", short(a.TP))
		if a.Flow != nil {
			fmt.Fprintf(&b, ", tear down %s", a.Flow.name)
		}
		if a.Commit {
			b.WriteString(" (commit first)")
		}
		fmt.Fprintf(&b, ": %v [%s]", a.Err, a.Class)
		if a.Fatal && a.First {
			b.WriteString(" (fatal, first)")
		} else if a.Fatal {
			b.WriteString(" (fatal)")
		} else if !a.Retry.IsZero() {
			fmt.Fprintf(&b, " (restart at %s)", a.Retry.Sub(epoch))
		}
	case ActHold:
		fmt.Fprintf(&b, "hold %s", short(a.TP))
		if a.First {
			b.WriteString(" (warn)")
		}
	case ActTick:
		fmt.Fprintf(&b, "tick at %s", a.At.Sub(epoch))
	case ActPersist:
		b.WriteString("persist")
	case ActCommit:
		b.WriteString("commit")
	case ActDrain:
		b.WriteString("drain")
	case ActPromote:
		b.WriteString("promote " + short(a.TP) + "'s standby replica: its copy is the start's base")
	}
	return b.String()
}

func describePartition(p *Partition[*testFlow]) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", short(p.tp), p.phase)
	if p.flow != nil {
		fmt.Fprintf(&b, " %s", p.flow.name)
	}
	if p.held != nil {
		fmt.Fprintf(&b, " (held since %s, retry at %s)", p.held.since.Sub(epoch), p.held.retry.Sub(epoch))
	}
	if p.phase == PhaseWaiting && p.held == nil && !p.retry.IsZero() {
		fmt.Fprintf(&b, " (restart %d at %s)", p.restarts, p.retry.Sub(epoch))
	}
	if p.err != nil {
		fmt.Fprintf(&b, " [%v]", p.err)
	}
	return b.String()
}
