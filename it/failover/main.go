// Command failover measures how long the partitions of a failed or
// restarted engine process stand still on a real Kafka broker: engine
// processes (this program, run as children with -member; -members of
// them, each with a Dir of its own) share a group and an input topic of
// -partitions partitions that a producer writes to all the time; one of
// them is SIGKILLed, stopped cleanly (SIGTERM: Close), or SIGKILLed and
// started again at once, or every one in turn is stopped and started
// again on its Dir after -down (a rolling restart). From the children's
// event lines it reads the time from the fault until the moved
// partitions are assigned and folding again, each partition's longest
// time without a fold, and the recoveries, delta or full.
//
// Settings ("old", "new", "static", "consumer", "previous", "dynamic",
// "default", "standby", "dynamic-standby"; allSettings says what each
// sets) are measured side by side, each fault under each.
//
//	make failover                                   # the failover table, on a broker of its own
//	make bench-deploys                              # the deploy tables (docs/benchmarks.md, "Deploys")
//	it/kafka/broker run go run ./it/failover -runs 3 -settings new,static -faults kill
//
// The broker's address comes from -brokers or SNAPFENCE_KAFKA_BROKERS
// (it/kafka/broker run sets it). Each measurement uses a fresh topic and
// group. Nothing here waits a fixed time for something to happen but the
// rolling restart's downtime, which is the scenario's: every step waits
// for the event that shows it, with a deadline that fails the run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"
	"github.com/snapfence/snapfence/internal/input"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// event is one line a member writes on stdout.
type event struct {
	Member string  `json:"member"`
	Ev     string  `json:"ev"` // up, assigned, revoked, lost, fold, recovered, exit
	Parts  []int32 `json:"parts,omitempty"`
	Kind   string  `json:"kind,omitempty"` // recovered: delta or full, and the reason
	At     int64   `json:"at"`             // unix nanoseconds
	Err    string  `json:"err,omitempty"`
}

func main() {
	var (
		member   = flag.String("member", "", "run as a member process with this name (used by the measuring parent)")
		brokers  = flag.String("brokers", os.Getenv("SNAPFENCE_KAFKA_BROKERS"), "bootstrap brokers, comma-separated (default $SNAPFENCE_KAFKA_BROKERS)")
		topic    = flag.String("topic", "", "member: input topic")
		session  = flag.Duration("session", 0, "member: kafkaio.Config.SessionTimeout (0: default)")
		hb       = flag.Duration("heartbeat", 0, "member: kafkaio.Config.HeartbeatInterval (0: default)")
		instance = flag.String("instance", "", "member: kafkaio.Config.InstanceID")
		dynamic  = flag.Bool("dynamic", false, "member: kafkaio.Config.DynamicMembership")
		sticky   = flag.Bool("sticky", false, "member: franz-go's cooperative-sticky balancer instead of the engine's default (the warm balancer)")
		proto    = flag.String("protocol", "classic", "member: classic (cooperative-sticky) or consumer (KIP-848)")
		dir      = flag.String("dir", "", "member: cache directory")
		standby  = flag.Int("standby", 0, "member: engine.Config.StandbyReplicas")
		keys     = flag.Int("keys", 0, "keys of state written before each measurement (spread over the partitions), so that a recovery has something to read")
		runs     = flag.Int("runs", 2, "measurements per setting and fault")
		settings = flag.String("settings", "old,new,static", "settings to measure: old, new, static, consumer, dynamic, default, standby")
		nparts   = flag.String("partitions", "6", "input partition counts to measure, comma-separated")
		nmembers = flag.Int("members", 2, "member processes (rolling: at least 3)")
		down     = flag.Duration("down", 0, "rolling, restart: how long a stopped member stays down before it starts again (a deploy's restart time)")
		faults   = flag.String("faults", "kill,stop,restart", "faults: kill (SIGKILL), stop (SIGTERM: a clean Close), restart (SIGKILL, then the same member again at once, on its directory), rolling (three members, each stopped cleanly and started again on its directory in turn), scaleout (the last of the members joins a running group)")
		verbose  = flag.Bool("v", false, "print every member event")
	)
	flag.Parse()
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "failover: no broker: set -brokers or SNAPFENCE_KAFKA_BROKERS (it/kafka/broker run does)")
		os.Exit(2)
	}
	seeds := strings.Split(*brokers, ",")
	if *member != "" {
		if err := runMember(*member, seeds, *topic, *session, *hb, *instance, *dynamic, *sticky, *proto, *dir, *standby); err != nil {
			emit(event{Member: *member, Ev: "exit", Err: err.Error()})
			os.Exit(1)
		}
		emit(event{Member: *member, Ev: "exit"})
		return
	}
	for _, ps := range strings.Split(*nparts, ",") {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "failover: -partitions %q: %v\n", ps, err)
			os.Exit(2)
		}
		m := &measurer{seeds: seeds, verbose: *verbose, keys: *keys, partitions: int32(n), members: *nmembers, down: *down}
		if err := m.all(strings.Split(*settings, ","), strings.Split(*faults, ","), *runs); err != nil {
			fmt.Fprintln(os.Stderr, "failover:", err)
			os.Exit(1)
		}
	}
}

var emitMu sync.Mutex

func emit(ev event) {
	if ev.At == 0 {
		ev.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(ev)
	emitMu.Lock()
	defer emitMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// ---- the member process ----

// watch reports the member's assignments and the first record it folds of
// each partition after the partition's assignment.
type watch struct {
	engine.NopObserver
	name   string
	h      input.Handler
	mu     sync.Mutex
	folded map[int32]bool
	// lastFold is when a fold event of each partition was last emitted:
	// one every foldEvery while it folds, for the parent's gaps.
	lastFold map[int32]time.Time
}

// foldEvery is how often a folding partition says so.
const foldEvery = 50 * time.Millisecond

// Recovered implements engine.Observer: each recovery's kind and reason.
func (w *watch) Recovered(tp store.TopicPartition, _ int, _ time.Duration, kind, reason string) {
	emit(event{Member: w.name, Ev: "recovered", Parts: []int32{tp.Partition}, Kind: kind + "/" + reason})
}

func (w *watch) Assigned(ctx context.Context, tps []store.TopicPartition) {
	w.mu.Lock()
	for _, tp := range tps {
		w.folded[tp.Partition] = false
	}
	w.mu.Unlock()
	emit(event{Member: w.name, Ev: "assigned", Parts: parts(tps)})
	w.h.Assigned(ctx, tps)
}

func (w *watch) Revoked(ctx context.Context, tps []store.TopicPartition) {
	w.forget(tps)
	emit(event{Member: w.name, Ev: "revoked", Parts: parts(tps)})
	w.h.Revoked(ctx, tps)
}

func (w *watch) Lost(ctx context.Context, tps []store.TopicPartition) {
	w.forget(tps)
	emit(event{Member: w.name, Ev: "lost", Parts: parts(tps)})
	w.h.Lost(ctx, tps)
}

func (w *watch) forget(tps []store.TopicPartition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, tp := range tps {
		delete(w.folded, tp.Partition)
	}
}

func (w *watch) fold(key []byte, state int, _ bool, rec engine.Record) (engine.Result[int], error) {
	now := time.Now()
	w.mu.Lock()
	first := !w.folded[rec.Partition]
	w.folded[rec.Partition] = true
	due := first || now.Sub(w.lastFold[rec.Partition]) >= foldEvery
	if due {
		w.lastFold[rec.Partition] = now
	}
	w.mu.Unlock()
	if due {
		emit(event{Member: w.name, Ev: "fold", Parts: []int32{rec.Partition}, At: now.UnixNano()})
	}
	return engine.Set(state + 1), nil
}

func parts(tps []store.TopicPartition) []int32 {
	out := make([]int32, 0, len(tps))
	for _, tp := range tps {
		out = append(out, tp.Partition)
	}
	return out
}

type intCodec struct{}

func (intCodec) Encode(n int) ([]byte, error) { return []byte(strconv.Itoa(n)), nil }
func (intCodec) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

func runMember(name string, seeds []string, topic string, session, hb time.Duration, instance string, dynamic, sticky bool, proto, dir string, standby int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: seeds, TransactionalIDPrefix: topic, Logger: log})
	if err != nil {
		return err
	}
	defer b.Close()
	w := &watch{name: name, folded: map[int32]bool{}, lastFold: map[int32]time.Time{}}
	e, err := engine.New(engine.Config[int]{Fold: w.fold, Codec: intCodec{}, Store: b, Dir: dir, StandbyReplicas: standby,
		PersistInterval: 200 * time.Millisecond, CommitInterval: 500 * time.Millisecond, Logger: log, Observer: w})
	if err != nil {
		return err
	}
	defer e.Close()
	cfg := kafkaio.Config{SeedBrokers: seeds, Group: topic + "-group", Topics: []string{topic},
		SessionTimeout: session, HeartbeatInterval: hb, InstanceID: instance, DynamicMembership: dynamic}
	switch {
	case proto == "consumer":
		cfg.ClientOpts = []kgo.Opt{kgo.ServerSideBalancer()}
	case sticky:
		// Range after it only so that the option is a choice of the
		// user's (a group of these members runs cooperative-sticky).
		cfg.ClientOpts = []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer(), kgo.RangeBalancer())}
	}
	newSource := cfg
	r, err := e.Join(input.Wrapped(newSource, func(h input.Handler) input.Handler {
		w.h = h
		return w
	}))
	if err != nil {
		return err
	}
	emit(event{Member: name, Ev: "up"})
	for ctx.Err() == nil {
		if err := r.Step(ctx); err != nil && ctx.Err() == nil {
			_ = r.Close(context.WithoutCancel(ctx))
			return err
		}
	}
	return r.Close(context.WithoutCancel(ctx))
}

// ---- the measuring parent ----

type setting struct {
	name             string
	session, hb      time.Duration
	static, consumer bool
	dynamic          bool // DynamicMembership: dynamic with a Dir
	sticky           bool // franz-go's cooperative-sticky, not the warm balancer
	standby          int
}

var allSettings = map[string]setting{
	"old":             {name: "old (45s/3s, franz-go's defaults)", session: 45 * time.Second, hb: 3 * time.Second, dynamic: true},
	"new":             {name: "new (10s/1s, KafkaConfig's defaults), dynamic", dynamic: true},
	"previous":        {name: "dynamic, cooperative-sticky (the previous defaults)", dynamic: true, sticky: true},
	"dynamic":         {name: "DynamicMembership (the warm balancer)", dynamic: true},
	"default":         {name: "the defaults (a Dir: static)"},
	"static":          {name: "static (10s/1s + InstanceID)", static: true},
	"consumer":        {name: "consumer protocol (KIP-848; the broker's session)", consumer: true},
	"standby":         {name: "the defaults + StandbyReplicas 1", standby: 1},
	"dynamic-standby": {name: "DynamicMembership + StandbyReplicas 1", dynamic: true, standby: 1},
}

type measurer struct {
	seeds   []string
	verbose bool
	adm     *kadm.Client
	keys    int
	// partitions is the input's partition count; members the member
	// processes.
	partitions int32
	members    int
	// down is how long a restarted member stays down.
	down time.Duration
}

// result is one measurement: from the fault until the moved partitions
// were all assigned again, and until each had a record folded; the
// longest time a partition folded nothing from the fault on (the worst
// partition's, and the median partition's); and the recoveries since the
// fault, delta and full.
type result struct {
	assigned, folded time.Duration
	moved            []int32
	worstGap, medGap time.Duration
	deltas, fulls    int
	fullReasons      map[string]int
}

func (m *measurer) all(settings, faults []string, runs int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(m.seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	m.adm = kadm.NewClient(cl)
	type row struct {
		setting, fault string
		res            []result
	}
	var rows []row
	for _, sn := range settings {
		s, ok := allSettings[sn]
		if !ok {
			return fmt.Errorf("unknown setting %q", sn)
		}
		for _, f := range faults {
			rw := row{setting: s.name, fault: f}
			for i := range runs {
				res, err := m.one(cl, s, f)
				if err != nil {
					return fmt.Errorf("%s, %s, run %d: %w", s.name, f, i+1, err)
				}
				fmt.Printf("%-52s %-8s run %d: moved %v assigned after %6.2fs, folding after %6.2fs; longest without a fold %.2fs (median partition %.2fs); recoveries %d delta, %d full %v\n",
					s.name, f, i+1, res.moved, res.assigned.Seconds(), res.folded.Seconds(), res.worstGap.Seconds(), res.medGap.Seconds(),
					res.deltas, res.fulls, res.fullReasons)
				rw.res = append(rw.res, res)
			}
			rows = append(rows, rw)
		}
	}
	fmt.Printf("\nfailover on %v, %d partitions, %d members, %d keys, classic protocol, the engine's default balancer unless named; seconds from the fault (min / median / max of %d)\n",
		m.seeds, m.partitions, m.members, m.keys, runs)
	fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", "setting", "fault", "moved partitions assigned", "recovered and folding",
		"longest without a fold: worst partition / median partition", "recoveries delta / full")
	for _, rw := range rows {
		var a, f, wg, mg []float64
		d, fu := 0, 0
		for _, r := range rw.res {
			a, f = append(a, r.assigned.Seconds()), append(f, r.folded.Seconds())
			wg, mg = append(wg, r.worstGap.Seconds()), append(mg, r.medGap.Seconds())
			d, fu = d+r.deltas, fu+r.fulls
		}
		fmt.Printf("| %s | %s | %s | %s | %s ; %s | %d / %d |\n", rw.setting, rw.fault, stats(a), stats(f), stats(wg), stats(mg), d, fu)
	}
	return nil
}

func stats(xs []float64) string {
	slices.Sort(xs)
	return fmt.Sprintf("%.1f / %.1f / %.1f", xs[0], xs[len(xs)/2], xs[len(xs)-1])
}

// proc is a running member process and its events.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when its stdout ends (it exited)
}

// one measures one fault: a fresh topic and group, a producer, members a
// and b; b fails.
func (m *measurer) one(cl *kgo.Client, s setting, fault string) (result, error) {
	ctx := context.Background()
	topic := fmt.Sprintf("failover-%d", time.Now().UnixNano())
	compact := "compact"
	if err := kafka.CreateTopic(ctx, cl, topic, m.partitions, 1, nil); err != nil {
		return result{}, err
	}
	if err := kafka.CreateTopic(ctx, cl, kafka.DefaultSnapshotTopic(topic, topic), m.partitions, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
		return result{}, err
	}
	defer m.adm.DeleteTopics(context.Background(), topic, kafka.DefaultSnapshotTopic(topic, topic))
	tmp, err := os.MkdirTemp("", "failover-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)

	// The producer: a record on every partition every 20 ms, so that a
	// partition that is consumed folds within one fetch.
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	prod, err := kgo.NewClient(kgo.SeedBrokers(m.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return result{}, err
	}
	defer prod.Close()
	// produced counts each key's records that landed, per partition: the
	// state every key must have at the end (the fold counts them).
	var producedMu sync.Mutex
	produced := map[string]int{}
	count := func(r *kgo.Record, err error) {
		if err == nil {
			producedMu.Lock()
			produced[fmt.Sprintf("%d/%s", r.Partition, r.Key)]++
			producedMu.Unlock()
		}
	}
	if err := m.seed(ctx, prod, count); err != nil {
		return result{}, err
	}
	var producing sync.WaitGroup
	producing.Add(1)
	go func() {
		defer producing.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for n := 0; pctx.Err() == nil; n++ {
			for p := range m.partitions {
				prod.Produce(pctx, &kgo.Record{Partition: p, Key: fmt.Appendf(nil, "k%d", n%50), Value: []byte("1")}, count)
			}
			select {
			case <-pctx.Done():
			case <-t.C:
			}
		}
	}()

	evs := make(chan event, 1024)
	start := func(name, instance string) (*proc, error) {
		args := []string{"-member", name, "-brokers", strings.Join(m.seeds, ","), "-topic", topic,
			"-session", s.session.String(), "-heartbeat", s.hb.String(), "-dir", tmp + "/" + instance}
		if s.static {
			args = append(args, "-instance", topic+"-"+instance)
		}
		if s.dynamic {
			args = append(args, "-dynamic")
		}
		if s.sticky {
			args = append(args, "-sticky")
		}
		if s.consumer {
			args = append(args, "-protocol", "consumer")
		}
		if s.standby > 0 {
			args = append(args, "-standby", strconv.Itoa(s.standby))
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(exe, args...)
		logf, err := os.Create(tmp + "/" + name + ".log")
		if err != nil {
			return nil, err
		}
		cmd.Stderr = logf
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var ev event
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					evs <- ev
				}
			}
			_, _ = io.Copy(io.Discard, out)
		}()
		return &proc{name: name, cmd: cmd, done: done}, nil
	}
	procs := map[string]*proc{}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	}()
	names := []string{"a", "b", "c", "d", "e", "f"}[:max(2, min(m.members, 6))]
	// A scale-out starts the last member only at the fault.
	running := names
	// verifyAll stops the input and checks the state: correct, not only
	// fast (every key's committed snapshot is the count of its records).
	verifyAll := func() error {
		stopProducing()
		producing.Wait()
		if err := prod.Flush(ctx); err != nil {
			return err
		}
		producedMu.Lock()
		defer producedMu.Unlock()
		return m.verify(ctx, topic, produced)
	}
	if fault == "scaleout" {
		running = names[:len(names)-1]
	}
	for _, name := range running {
		p, err := start(name, name)
		if err != nil {
			return result{}, err
		}
		procs[name] = p
	}

	// owner: the member each partition is assigned to; folding: whether its
	// owner has folded a record of it since the assignment.
	owner := map[int32]string{}
	folding := map[int32]bool{}
	// ownedAt, foldAt: when (the member's clock, this machine's) the
	// partition was assigned to its owner, and first folded by it.
	ownedAt, foldAt := map[int32]int64{}, map[int32]int64{}
	live := map[string]bool{}
	for _, name := range running {
		live[name] = true
	}
	// From the fault on (window): each partition's last fold and longest
	// gap between folds, and the recoveries.
	var window int64
	lastFold, gaps := map[int32]int64{}, map[int32]int64{}
	recoveries := map[string]int{}
	startWindow := func(at time.Time) { window = at.UnixNano() }
	apply := func(ev event) error {
		if ev.Ev == "fold" {
			// Any process's fold counts, a stopping one's too: the
			// partition was folded.
			p := ev.Parts[0]
			if window > 0 && ev.At > window {
				gaps[p] = max(gaps[p], ev.At-max(lastFold[p], window))
			}
			lastFold[p] = max(lastFold[p], ev.At)
		}
		if ev.Ev == "recovered" && window > 0 && ev.At > window {
			recoveries[ev.Kind]++
		}
		if !live[ev.Member] {
			return nil // the failed member's last words
		}
		if m.verbose {
			fmt.Printf("  %s %-8s %v %s\n", ev.Member, ev.Ev, ev.Parts, ev.Err)
		}
		switch ev.Ev {
		case "assigned":
			for _, p := range ev.Parts {
				owner[p], folding[p], ownedAt[p] = ev.Member, false, ev.At
			}
		case "revoked", "lost":
			for _, p := range ev.Parts {
				if owner[p] == ev.Member {
					delete(owner, p)
					delete(folding, p)
				}
			}
		case "fold":
			if p := ev.Parts[0]; owner[p] == ev.Member && !folding[p] {
				folding[p], foldAt[p] = true, ev.At
			}
		case "exit":
			live[ev.Member] = false
			if ev.Err != "" && ev.Member != "b" {
				return fmt.Errorf("member %s failed: %s", ev.Member, ev.Err)
			}
		}
		return nil
	}
	// waitFor applies events until cond holds, at most d.
	waitFor := func(d time.Duration, what string, cond func() bool) (event, error) {
		deadline := time.NewTimer(d)
		defer deadline.Stop()
		var last event
		for !cond() {
			select {
			case ev := <-evs:
				if err := apply(ev); err != nil {
					return last, err
				}
				last = ev
			case <-deadline.C:
				return last, fmt.Errorf("no %s within %v (owners %v, folding %v)", what, d, owner, folding)
			}
		}
		return last, nil
	}
	balanced := func() bool {
		n := map[string]int{}
		for p := range m.partitions {
			if !folding[p] {
				return false
			}
			n[owner[p]]++
		}
		for _, name := range running {
			if n[name] == 0 {
				return false
			}
		}
		return true
	}
	if _, err := waitFor(2*time.Minute, "steady state (both members folding, every partition)", balanced); err != nil {
		return result{}, err
	}
	var moved []int32
	for p, o := range owner {
		if o == "b" {
			moved = append(moved, p)
		}
	}
	slices.Sort(moved)

	// finish fills res's gaps and recoveries.
	finish := func(res result) result {
		var all []int64
		for p := range m.partitions {
			all = append(all, gaps[p]) // each is closed: every partition folds again at the end
		}
		slices.Sort(all)
		res.worstGap, res.medGap = time.Duration(all[len(all)-1]), time.Duration(all[len(all)/2])
		res.fullReasons = map[string]int{}
		for k, n := range recoveries {
			kind, reason, _ := strings.Cut(k, "/")
			if kind == "delta" {
				res.deltas += n
			} else {
				res.fulls += n
				res.fullReasons[reason] += n
			}
		}
		return res
	}
	if fault == "scaleout" {
		// The last member joins; the window ends once it folds its share
		// and every partition folded since it started.
		joined := names[len(names)-1]
		faultAt := time.Now()
		startWindow(faultAt)
		p, err := start(joined, joined)
		if err != nil {
			return result{}, err
		}
		procs[joined], live[joined] = p, true
		running = names
		const deadline = 3 * time.Minute
		if _, err := waitFor(deadline, "the new member folding its share", func() bool {
			if !balanced() {
				return false
			}
			for p := range m.partitions {
				if lastFold[p] <= faultAt.UnixNano() {
					return false
				}
			}
			return true
		}); err != nil {
			return result{}, err
		}
		res := result{}
		var lastOwned, lastFolded int64
		for p, o := range owner {
			if o == joined {
				res.moved = append(res.moved, p)
				lastOwned, lastFolded = max(lastOwned, ownedAt[p]), max(lastFolded, foldAt[p])
			}
		}
		slices.Sort(res.moved)
		res.assigned, res.folded = time.Unix(0, lastOwned).Sub(faultAt), time.Unix(0, lastFolded).Sub(faultAt)
		return finish(res), verifyAll()
	}
	if fault == "rolling" {
		startWindow(time.Now())
		res, err := m.rolling(names, procs, start, live, owner, folding, ownedAt, waitFor, verifyAll)
		return finish(res), err
	}

	// The fault, then the wait for every moved partition to be owned by a
	// live member and folding again.
	b := procs["b"]
	var faultAt time.Time
	switch fault {
	case "kill", "restart":
		faultAt = time.Now()
		startWindow(faultAt)
		if err := b.cmd.Process.Kill(); err != nil {
			return result{}, err
		}
	case "stop":
		faultAt = time.Now()
		startWindow(faultAt)
		if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return result{}, err
		}
	default:
		return result{}, fmt.Errorf("unknown fault %q", fault)
	}
	if fault != "stop" {
		// A clean stop's revoke and leave are part of the failover: b's
		// events count until it exits. A killed b says nothing more.
		live["b"] = false
		for p, o := range owner {
			if o == "b" {
				delete(owner, p)
			}
		}
	}
	if fault == "restart" {
		// The same member started again at once, once the killed one is
		// gone (with the same InstanceID if static).
		<-b.done
		p, err := start("b2", "b")
		if err != nil {
			return result{}, err
		}
		procs["b2"] = p
		live["b2"] = true
	}
	const deadline = 3 * time.Minute
	res := result{moved: moved}
	since := func(at map[int32]int64) time.Duration {
		var last int64
		for _, p := range moved {
			last = max(last, at[p])
		}
		return time.Unix(0, last).Sub(faultAt)
	}
	if _, err := waitFor(deadline, "folding on the moved partitions", func() bool {
		for _, p := range moved {
			if o := owner[p]; o == "b" || !live[o] || !folding[p] || ownedAt[p] < faultAt.UnixNano() {
				return false
			}
		}
		return true
	}); err != nil {
		return res, err
	}
	res.assigned, res.folded = since(ownedAt), since(foldAt)
	// The partitions that did not move: a fold of each after the fault
	// closes its gap.
	if _, err := waitFor(deadline, "a fold of every partition", func() bool {
		for p := range m.partitions {
			if lastFold[p] <= faultAt.UnixNano() {
				return false
			}
		}
		return true
	}); err != nil {
		return res, err
	}
	res = finish(res)
	if err := verifyAll(); err != nil {
		return res, err
	}
	return res, nil
}

// rolling restarts the members one after another, each with SIGTERM (a
// clean Close), then again on its directory (and InstanceID, if static)
// once it exited, and waits before the next until every partition is
// folding again. The result is the slowest restart's: from its SIGTERM
// until its partitions were assigned again, and until every partition was
// folding.
func (m *measurer) rolling(names []string, procs map[string]*proc, start func(name, instance string) (*proc, error),
	live map[string]bool, owner map[int32]string, folding map[int32]bool, ownedAt map[int32]int64,
	waitFor func(time.Duration, string, func() bool) (event, error), verify func() error) (result, error) {
	var res result
	for i, name := range names {
		p := procs[name]
		mine := []int32{}
		for part, o := range owner {
			if o == name {
				mine = append(mine, part)
			}
		}
		slices.Sort(mine)
		t0 := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return res, err
		}
		<-p.done
		if m.down > 0 {
			// Down for a while, as a deploy's restart is; the events
			// meanwhile (others taking its partitions over) apply.
			downtime := time.NewTimer(m.down)
			ended := false
			if _, err := waitFor(m.down+time.Minute, "the end of the downtime", func() bool {
				select {
				case <-downtime.C:
					ended = true
				default:
				}
				return ended
			}); err != nil {
				return res, err
			}
		}
		// Its last events (revokes, exit) are in the channel before the
		// restarted member's: waitFor applies them in order.
		next := fmt.Sprintf("%s%d", name, i+2)
		np, err := start(next, name)
		if err != nil {
			return res, err
		}
		procs[next], live[next] = np, true
		exited := false
		if _, err := waitFor(3*time.Minute, "the restarted member "+next+" folding", func() bool {
			if !exited {
				exited = !live[name]
				if !exited {
					return false
				}
			}
			got := 0
			for part := range m.partitions {
				if !folding[part] || !live[owner[part]] {
					return false
				}
				if owner[part] == next {
					got++
				}
			}
			return got > 0
		}); err != nil {
			return res, err
		}
		var assigned, folded int64
		for part := range m.partitions {
			if owner[part] == next {
				assigned = max(assigned, ownedAt[part])
			}
		}
		folded = time.Now().UnixNano()
		a, f := time.Unix(0, assigned).Sub(t0), time.Unix(0, folded).Sub(t0)
		if m.verbose {
			fmt.Printf("  rolling: %s (owned %v) restarted as %s: assigned after %.2fs, all folding after %.2fs\n", name, mine, next, a.Seconds(), f.Seconds())
		}
		res.assigned, res.folded = max(res.assigned, a), max(res.folded, f)
		res.moved = append(res.moved, mine...)
	}
	slices.Sort(res.moved)
	return res, verify()
}

// seed writes m.keys keys of state ("s0", "s1", ...; one record each,
// round-robin over the partitions) and waits for them to land.
func (m *measurer) seed(ctx context.Context, prod *kgo.Client, count func(*kgo.Record, error)) error {
	for i := range m.keys {
		prod.Produce(ctx, &kgo.Record{Partition: int32(i) % m.partitions, Key: fmt.Appendf(nil, "s%d", i), Value: []byte("1")}, count)
	}
	return prod.Flush(ctx)
}

// verify waits until the group has committed every input partition to its
// end, then reads the snapshot topic read_committed and checks every
// key's state against want (partition/key -> records produced).
func (m *measurer) verify(ctx context.Context, topic string, want map[string]int) error {
	group := topic + "-group"
	ends, err := m.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		committed, err := m.adm.FetchOffsets(kadm.RequireStable(ctx), group)
		done := err == nil
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(o.Topic, o.Partition)
			done = done && ok && c.At == o.Offset
		})
		if done {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("verify: the group did not commit to the input's end %v within 3 min", ends)
		}
		time.Sleep(200 * time.Millisecond) // polling the observed commit, bounded above
	}
	snaps := kafka.DefaultSnapshotTopic(topic, topic)
	hws, err := m.adm.ListEndOffsets(ctx, snaps)
	if err != nil {
		return err
	}
	at := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	hws.Each(func(o kadm.ListedOffset) {
		at[o.Partition] = kgo.NewOffset().AtStart()
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	rd, err := kgo.NewClient(kgo.SeedBrokers(m.seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{snaps: at}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return err
	}
	defer rd.Close()
	got := map[string]int{}
	undecodable := 0
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := rd.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return fmt.Errorf("verify: reading %s: %w (partitions left: %v)", snaps, err, left)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("verify: reading %s: %w", snaps, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			sn, kind, err := kafkatest.DecodeRecord(snaps, r)
			if err != nil {
				undecodable++
				return
			}
			if kind == wire.KindOffsetMarker {
				return
			}
			k := fmt.Sprintf("%d/%s", r.Partition, sn.Key)
			if sn.Tombstone {
				delete(got, k)
				return
			}
			n, _ := strconv.Atoi(string(sn.Value))
			got[k] = n
		})
	}
	if undecodable > 0 {
		return fmt.Errorf("verify: %d records of %s do not decode", undecodable, snaps)
	}
	var wrong []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			wrong = append(wrong, fmt.Sprintf("%s: snapshot %d, produced %d", k, got[k], want[k]))
		}
	}
	if len(wrong) > 0 || len(got) != len(want) {
		return fmt.Errorf("verify: %d of %d keys wrong (%d keys in the snapshots), for example %v", len(wrong), len(want), len(got), wrong[:min(len(wrong), 5)])
	}
	return nil
}
