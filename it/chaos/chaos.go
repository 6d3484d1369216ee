package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store/kafka"
)

// The fault kinds.
const (
	engineKill    = "engine-kill"    // SIGKILL, then started again on its Dir
	engineStop    = "engine-stop"    // SIGTERM (a clean Close), then started again
	enginePause   = "engine-pause"   // SIGSTOP past the session timeout, then SIGCONT
	brokerKill    = "broker-kill"    // SIGKILL of a node, then restart-node
	brokerRestart = "broker-restart" // stop-node (SIGTERM), then restart-node
	// A broker node SIGKILLed, an engine process SIGKILLed while the node
	// is down, then the node restarted, then the engine: on a single
	// node, the engine dies with its transaction open while no
	// coordinator is there to end it, and the restarted coordinator may
	// have lost the tail of __transaction_state.
	outageKill = "engine-kill-in-outage"
)

var faultKinds = []string{engineKill, engineStop, enginePause, brokerKill, brokerRestart, outageKill}

// The roles a broker kill aims at, in turn.
const (
	roleController = "controller"
	roleTxnLeader  = "__transaction_state leader"
	roleOffsLeader = "__consumer_offsets leader"
)

// fault is one entry of the schedule.
type fault struct {
	Kind   string `json:"kind"`
	Member int    `json:"member,omitempty"` // engine faults
	Role   string `json:"role,omitempty"`   // broker kills: the role the node is chosen by
	Node   int    `json:"node,omitempty"`   // broker restarts
}

func (f fault) String() string {
	switch f.Kind {
	case brokerKill:
		return fmt.Sprintf("%s (the %s)", f.Kind, f.Role)
	case brokerRestart:
		return fmt.Sprintf("%s node %d", f.Kind, f.Node)
	case outageKill:
		return fmt.Sprintf("%s m%d (broker: the %s)", f.Kind, f.Member, f.Role)
	default:
		return fmt.Sprintf("%s m%d", f.Kind, f.Member)
	}
}

// makeSchedule draws the order of the faults from seed: the same seed and
// sizes give the same schedule.
func makeSchedule(seed uint64, members, nodes, kills, stops, pauses, bkills, brestarts, okills int) []fault {
	var s []fault
	for i := range kills {
		s = append(s, fault{Kind: engineKill, Member: i % members})
	}
	for i := range stops {
		s = append(s, fault{Kind: engineStop, Member: (i + 1) % members})
	}
	for i := range pauses {
		s = append(s, fault{Kind: enginePause, Member: (i + 2) % members})
	}
	roles := []string{roleController, roleTxnLeader, roleOffsLeader}
	for i := range bkills {
		s = append(s, fault{Kind: brokerKill, Role: roles[i%len(roles)]})
	}
	for i := range brestarts {
		s = append(s, fault{Kind: brokerRestart, Node: i % max(nodes, 1)})
	}
	for i := range okills {
		s = append(s, fault{Kind: outageKill, Member: i % members, Role: roles[(i+1)%len(roles)]})
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// chaos is the parent: the cluster, the members, the schedule.
type chaos struct {
	seeds      []string
	clusterDir string
	cluster    *kafkatest.Cluster
	nodes      int
	seed       uint64
	members    int
	partitions int32
	keys, rate int
	session    time.Duration
	timeout    time.Duration
	keep       bool
	verbose    bool
	broken     string        // -break: the members' deliberate bug (a negative control)
	abortHang  bool          // -abort-hanging: the members' kafka.Config.AbortHangingTransactions
	duration   time.Duration // -duration: the faults spread over it, the producer runs at least as long
	outage     time.Duration // -outage: how long a node stays down in an engine-kill-in-outage
	schedule   []fault
	// killed are the nodes killed in the current round of broker kills:
	// each node is killed once before any is killed again.
	killed map[int]bool

	// The current mode's world; mu guards procs and statuses.
	mu       sync.Mutex
	procs    map[string]*proc
	notify   chan struct{} // a status line or an exit arrived
	mode     string
	topic    string
	output   string
	tail     *tail // the mode's concurrent read_committed consumer of output
	tmp      string
	failures []string // members that died on their own
	start    time.Time
	holds    holdWatch // the partitions held, and how long the others folded nothing meanwhile
}

// proc is one incarnation of a member process.
type proc struct {
	name     string // m0, m1, ...
	inc      int    // incarnation: 1, 2, ...
	cmd      *exec.Cmd
	done     chan struct{} // closed once it exited and its stdout ended
	exitErr  error
	expected bool // its exit was asked for (kill, stop)
	paused   bool
	startAt  time.Time
	// status is its latest status line; statusAt when it arrived.
	status   event
	statusAt time.Time
	up       bool
}

func (c *chaos) openCluster() error {
	c.nodes = len(c.seeds)
	if c.clusterDir == "" {
		return nil
	}
	cl, err := kafkatest.OpenCluster(c.clusterDir)
	if err != nil {
		return err
	}
	c.cluster, c.nodes = cl, cl.Nodes
	return nil
}

func (c *chaos) logf(format string, args ...any) {
	fmt.Printf("%7.1fs  %s\n", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

// run runs the workload once per mode on fresh topics and returns the report.
func (c *chaos) run(modes []string) (*report, error) {
	c.start = time.Now()
	rep := &report{Seed: c.seed, Brokers: strings.Join(c.seeds, ","), Members: c.members, Partitions: int(c.partitions),
		Keys: c.keys, Rate: c.rate}
	for _, f := range c.schedule {
		rep.Schedule = append(rep.Schedule, f.String())
	}
	fmt.Printf("chaos: seed %d, %d members, %d partitions, %d keys, %d records/s, modes %v, %d nodes\n",
		c.seed, c.members, c.partitions, c.keys, c.rate, modes, c.nodes)
	fmt.Printf("schedule (seed %d, %d faults):\n", c.seed, len(c.schedule))
	for i, f := range c.schedule {
		fmt.Printf("  %2d  %s\n", i+1, f)
	}
	for _, mode := range modes {
		mr, err := c.runMode(mode)
		if mr != nil {
			if err != nil {
				mr.abort(err)
			}
			rep.Modes = append(rep.Modes, mr)
		}
		if err != nil {
			rep.finish(time.Since(c.start))
			return rep, fmt.Errorf("mode %s: %w", mode, err)
		}
	}
	rep.finish(time.Since(c.start))
	return rep, nil
}

// killAll SIGKILLs every member process still running and reaps it.
func (c *chaos) killAll() {
	c.mu.Lock()
	var ps []*proc
	for _, p := range c.procs {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		c.mu.Lock()
		p.expected = true
		c.mu.Unlock()
		_ = p.cmd.Process.Kill() // a stopped process dies of SIGKILL too
		<-p.done
	}
}

func (c *chaos) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// startMember starts member i's next incarnation on its directory.
func (c *chaos) startMember(i int) (*proc, error) {
	name := fmt.Sprintf("m%d", i)
	c.mu.Lock()
	inc := 1
	if old := c.procs[name]; old != nil {
		inc = old.inc + 1
	}
	c.mu.Unlock()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-member", name, "-brokers", strings.Join(c.seeds, ","), "-topic", c.topic, "-output", c.output,
		"-dir", filepath.Join(c.tmp, name), "-mode", c.mode, "-session", c.session.String(), "-break", c.broken,
		fmt.Sprintf("-abort-hanging=%v", c.abortHang)}
	cmd := exec.Command(exe, args...)
	// A child dies with this process even if it is SIGKILLed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(c.tmp, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "==== %s incarnation %d, %s\n", name, inc, time.Now().Format(time.RFC3339Nano))
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{name: name, inc: inc, cmd: cmd, done: make(chan struct{}), startAt: time.Now()}
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	go func() {
		defer close(p.done)
		defer logf.Close()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			c.mu.Lock()
			switch ev.Ev {
			case "up":
				p.up = true
			case "status":
				if c.verbose && !sameParts(p.status, ev) {
					c.logf("  %s#%d running %v other %v live %v %s", name, inc, ev.Running, ev.Other, ev.Live, ev.Err)
				}
				p.status, p.statusAt = ev, time.Now()
				c.holds.observe(c, p, ev)
			case "exit":
				if ev.Err != "" {
					p.exitErr = errors.New(ev.Err)
				}
			}
			c.mu.Unlock()
			c.wake()
		}
		_, _ = io.Copy(io.Discard, out)
		werr := cmd.Wait()
		c.mu.Lock()
		if p.exitErr == nil && werr != nil {
			p.exitErr = werr
		}
		c.mu.Unlock()
		c.wake()
	}()
	return p, nil
}

func sameParts(a, b event) bool {
	return slices.Equal(a.Running, b.Running) && slices.Equal(a.Other, b.Other) && a.Live == b.Live && a.Err == b.Err
}

func exited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor waits until cond (called with c.mu held) holds, re-checking on
// every status line and exit, at most c.timeout. A member that died
// without being asked to is recorded as a failure and started again.
func (c *chaos) waitFor(what string, cond func() bool) error {
	deadline := time.NewTimer(c.timeout)
	defer deadline.Stop()
	// The producer's acknowledgements do not wake the wait; a status
	// line arrives at least every second from every live member.
	for {
		if err := c.reviveDead(); err != nil {
			return err
		}
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-c.notify:
		case <-deadline.C:
			return fmt.Errorf("no %s within %v: %s", what, c.timeout, c.picture())
		}
	}
}

// reviveDead starts again every member that exited on its own.
func (c *chaos) reviveDead() error {
	for i := range c.members {
		name := fmt.Sprintf("m%d", i)
		c.mu.Lock()
		p := c.procs[name]
		dead := p != nil && !p.expected && exited(p)
		var err error
		if dead {
			err = p.exitErr
			p.expected = true
		}
		c.mu.Unlock()
		if !dead {
			continue
		}
		msg := fmt.Sprintf("%s#%d exited on its own after %.1fs: %v (log %s)", name, p.inc, time.Since(p.startAt).Seconds(), err,
			filepath.Join(c.tmp, name+".log"))
		c.logf("FAILURE: %s; starting it again", msg)
		c.failures = append(c.failures, msg)
		if _, err := c.startMember(i); err != nil {
			return err
		}
	}
	return nil
}

// picture is the members' latest statuses, for an error message.
func (c *chaos) picture() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for i := range c.members {
		p := c.procs[fmt.Sprintf("m%d", i)]
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "%s#%d", p.name, p.inc)
		switch {
		case exited(p):
			fmt.Fprintf(&b, " exited (%v)", p.exitErr)
		case p.paused:
			b.WriteString(" paused")
		}
		fmt.Fprintf(&b, " running %v other %v (%.1fs ago) %s; ", p.status.Running, p.status.Other,
			time.Since(p.statusAt).Seconds(), p.status.Err)
	}
	return b.String()
}

// allRunning: every partition runs on exactly one of the members that are
// up and not paused, as their status lines since `since` say, and each of
// them runs some (a balanced group, when there are enough partitions). The
// members listed in exclude are left out (a paused one). c.mu is held.
func (c *chaos) allRunning(since time.Time, exclude string, eachOwns bool) bool {
	owner := map[int32]string{}
	for i := range c.members {
		p := c.procs[fmt.Sprintf("m%d", i)]
		if p == nil {
			return false
		}
		if p.name == exclude {
			continue
		}
		if exited(p) || p.paused || p.statusAt.Before(since) || !p.status.Live {
			return false
		}
		if eachOwns && len(p.status.Running) == 0 && int(c.partitions) >= c.members {
			return false
		}
		for _, part := range p.status.Running {
			if _, dup := owner[part]; dup {
				return false
			}
			owner[part] = p.name
		}
	}
	return len(owner) == int(c.partitions)
}

// runMode runs the workload and the schedule in one mode, then verifies.
func (c *chaos) runMode(mode string) (*modeReport, error) {
	ctx := context.Background()
	c.mode = mode
	c.topic = fmt.Sprintf("chaos-%s-%d-%d", mode, c.seed, time.Now().UnixNano()%1e9)
	c.output = c.topic + "-out"
	mr := &modeReport{Mode: mode, Topic: c.topic, Faults: map[string]int{}}
	c.logf("mode %s: input %s (%d partitions), output %s", mode, c.topic, c.partitions, c.output)

	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	rf := int16(min(3, c.nodes))
	compact := "compact"
	for _, t := range []struct {
		name string
		cfg  map[string]*string
	}{{c.topic, nil}, {kafka.DefaultSnapshotTopic(c.topic, c.topic), map[string]*string{"cleanup.policy": &compact}}, {c.output, nil}} {
		if err := kafka.CreateTopic(ctx, admCl, t.name, c.partitions, rf, t.cfg); err != nil {
			return nil, fmt.Errorf("creating %s: %w", t.name, err)
		}
	}
	// The concurrent read_committed consumer of the outputs, from before
	// the first output to after the verifier's read.
	c.tail, err = startTail(c.seeds, c.output)
	if err != nil {
		return nil, err
	}
	defer c.tail.stop()
	c.tmp, err = os.MkdirTemp("", "chaos-"+mode+"-")
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = map[string]*proc{}
	c.failures = nil
	c.holds.reset(c.partitions)
	c.mu.Unlock()
	c.notify = make(chan struct{}, 1)
	passed := false
	defer func() {
		c.killAll()
		if passed && !c.keep {
			os.RemoveAll(c.tmp)
		} else {
			fmt.Printf("mode %s: the members' directories and logs are kept in %s\n", mode, c.tmp)
		}
	}()

	// The producer: -rate records a second, each with the next sequence
	// number, keys round-robin; records are keyed, so a key stays on one
	// partition (franz-go's default partitioner hashes the key).
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.DefaultProduceTopic(c.topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	var acked, produceErrs atomic.Int64
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var producing sync.WaitGroup
	producing.Add(1)
	go func() {
		defer producing.Done()
		tick := max(10*time.Millisecond, time.Second/time.Duration(max(1, c.rate)))
		perTick := max(1, int(int64(c.rate)*int64(tick)/int64(time.Second)))
		t := time.NewTicker(tick)
		defer t.Stop()
		var seq int64
		for pctx.Err() == nil {
			for range perTick {
				seq++
				prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", seq%int64(c.keys)), Value: fmt.Appendf(nil, "%d", seq)},
					func(_ *kgo.Record, err error) {
						if err != nil {
							produceErrs.Add(1)
						} else {
							acked.Add(1)
						}
					})
			}
			select {
			case <-pctx.Done():
			case <-t.C:
			}
		}
	}()
	stopProducer := func() error {
		stopProducing()
		producing.Wait()
		fctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		if err := prod.Flush(fctx); err != nil {
			return fmt.Errorf("flushing the producer: %w", err)
		}
		return nil
	}

	for i := range c.members {
		if _, err := c.startMember(i); err != nil {
			return mr, err
		}
	}
	t0 := time.Now()
	if err := c.waitFor("steady state (every partition running, every member owning some)", func() bool {
		return c.allRunning(t0, "", true)
	}); err != nil {
		return mr, err
	}
	c.logf("steady: every partition running after %.1fs; %d records in", time.Since(t0).Seconds(), acked.Load())
	steady := time.Now()
	c.countGaps(true)

	for i, f := range c.schedule {
		// With -duration the faults are spread over it: fault i is due
		// at i+1 n+1ths of it (a pace, not a synchronisation: the
		// recovery before it was observed).
		if err := c.pace(steady, time.Duration(int64(c.duration)*int64(i+1)/int64(len(c.schedule)+1))); err != nil {
			return mr, err
		}
		rec, err := c.inject(ctx, f, &acked)
		rec.Index = i + 1
		mr.FaultLog = append(mr.FaultLog, rec)
		if err != nil {
			_ = stopProducer()
			mr.Produced, mr.ProduceErrors = acked.Load(), produceErrs.Load()
			mr.MemberFailures = c.failures
			return mr, fmt.Errorf("fault %d (%s): %w", i+1, f, err)
		}
		mr.Faults[f.Kind]++
		c.logf("fault %d/%d %s: recovered after %.1fs%s; %d records in", i+1, len(c.schedule), rec.Fault, rec.RecoverSeconds,
			rec.Detail, acked.Load())
	}

	if err := c.pace(steady, c.duration); err != nil {
		return mr, err
	}
	c.countGaps(false)
	c.logf("schedule done; stopping the producer")
	if err := stopProducer(); err != nil {
		return mr, err
	}
	mr.Produced, mr.ProduceErrors = acked.Load(), produceErrs.Load()
	if err := c.verify(ctx, adm, mr); err != nil {
		mr.Problems = append(mr.Problems, err.Error())
	}
	c.mu.Lock()
	mr.MemberFailures = append(mr.MemberFailures, c.failures...)
	c.holds.finish()
	mr.Holds, mr.HeldErrors = c.holds.holds, c.holds.heldErrs
	mr.HeldMaxSeconds = c.holds.heldMax.Seconds()
	mr.UnheldGapSeconds, mr.UnheldGapWhere = c.holds.gap.Seconds(), c.holds.gapWhere
	c.mu.Unlock()
	var err2 error
	mr.HangLogs, mr.HangLogExamples, err2 = scanHangLogs(c.tmp, c.members)
	if err2 != nil {
		mr.Problems = append(mr.Problems, "reading the members' logs: "+err2.Error())
	}
	mr.finish()
	passed = mr.Verdict == "pass"
	return mr, nil
}

// countGaps starts or stops counting how long unheld partitions fold
// nothing during a hold.
func (c *chaos) countGaps(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds.count(on)
}

// pace waits until since+d, the time -duration gives the next step; the
// members that die meanwhile are started again.
func (c *chaos) pace(since time.Time, d time.Duration) error {
	due := since.Add(d)
	for {
		left := time.Until(due)
		if left <= 0 {
			return nil
		}
		if err := c.reviveDead(); err != nil {
			return err
		}
		select {
		case <-c.notify:
		case <-time.After(left):
		}
	}
}

// faultRecord is one injected fault and its recovery.
type faultRecord struct {
	Index          int     `json:"index"`
	Fault          string  `json:"fault"`
	Kind           string  `json:"kind"`
	Target         string  `json:"target"`
	Detail         string  `json:"detail,omitempty"`
	RecoverSeconds float64 `json:"recover_seconds"`
}

// inject injects one fault and waits for the recovery.
func (c *chaos) inject(ctx context.Context, f fault, acked *atomic.Int64) (faultRecord, error) {
	rec := faultRecord{Fault: f.String(), Kind: f.Kind}
	switch f.Kind {
	case engineKill, engineStop, enginePause:
		name := fmt.Sprintf("m%d", f.Member)
		rec.Target = name
		c.mu.Lock()
		p := c.procs[name]
		p.expected = true
		c.mu.Unlock()
		t0 := time.Now()
		switch f.Kind {
		case engineKill, engineStop:
			sig := syscall.SIGKILL
			if f.Kind == engineStop {
				sig = syscall.SIGTERM
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				return rec, err
			}
			if err := c.waitFor(name+" exiting after "+sig.String(), func() bool { return exited(p) }); err != nil {
				return rec, err
			}
			if f.Kind == engineStop && p.exitErr != nil {
				c.failures = append(c.failures, fmt.Sprintf("%s#%d: a clean stop ended with %v", name, p.inc, p.exitErr))
			}
			if _, err := c.startMember(f.Member); err != nil {
				return rec, err
			}
		case enginePause:
			if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				return rec, err
			}
			c.mu.Lock()
			p.paused, p.expected = true, false
			c.mu.Unlock()
			// Past the session timeout: the others run every partition.
			if err := c.waitFor("the other members running every partition while "+name+" is stopped", func() bool {
				return c.allRunning(t0, name, false)
			}); err != nil {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				return rec, err
			}
			rec.Detail = fmt.Sprintf(" (the others took its partitions %.1fs after SIGSTOP)", time.Since(t0).Seconds())
			if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				return rec, err
			}
			c.mu.Lock()
			p.paused = false
			c.mu.Unlock()
		}
		since := time.Now()
		if err := c.waitFor("every partition running again after "+rec.Fault, func() bool { return c.allRunning(since, "", true) }); err != nil {
			return rec, err
		}
		rec.RecoverSeconds = time.Since(t0).Seconds()
		return rec, nil

	case brokerKill, brokerRestart:
		node := f.Node
		if f.Kind == brokerKill {
			var err error
			node, rec.Detail, err = c.pickNode(ctx, f.Role)
			if err != nil {
				return rec, err
			}
		}
		rec.Target = fmt.Sprintf("node %d", node)
		t0 := time.Now()
		c.countGaps(false)
		if f.Kind == brokerKill && c.nodes == 1 {
			// A single node: nothing serves until it is back, so it is
			// started again at once, under the load that piled up.
			if err := c.cluster.KillNode(ctx, node); err != nil {
				return rec, err
			}
		} else if f.Kind == brokerKill {
			if err := c.cluster.KillNode(ctx, node); err != nil {
				return rec, err
			}
			// The cluster works without it: the producer delivers and
			// every partition runs, observed after the kill.
			from := acked.Load()
			if err := c.waitFor(fmt.Sprintf("records delivered and every partition running with node %d down", node), func() bool {
				return acked.Load() >= from+int64(max(10, c.rate)) && c.allRunning(t0, "", false)
			}); err != nil {
				return rec, err
			}
			rec.Detail += fmt.Sprintf("; served with it down %.1fs after the kill", time.Since(t0).Seconds())
		} else {
			if err := c.cluster.StopNode(ctx, node); err != nil {
				return rec, err
			}
		}
		if err := c.cluster.RestartNode(ctx, node); err != nil {
			return rec, err
		}
		if err := c.cluster.WaitHealthy(ctx, c.timeout); err != nil {
			return rec, err
		}
		c.countGaps(true)
		// Most of a broker fault's recovery is the node's: its JVM's
		// start and its replicas catching up. Said apart from the
		// engine's part, which follows.
		rec.Detail += fmt.Sprintf("; node back and cluster healthy %.1fs after the fault", time.Since(t0).Seconds())
		since := time.Now()
		if err := c.waitFor("every partition running after "+rec.Fault, func() bool { return c.allRunning(since, "", true) }); err != nil {
			return rec, err
		}
		rec.RecoverSeconds = time.Since(t0).Seconds()
		return rec, nil

	case outageKill:
		return c.injectOutageKill(ctx, f, rec)
	}
	return rec, fmt.Errorf("unknown fault kind %q", f.Kind)
}

// injectOutageKill SIGKILLs a broker node, then the member while the node
// is down, then restarts the node (waiting for the cluster to be healthy),
// then the member, and waits for every partition to run again.
func (c *chaos) injectOutageKill(ctx context.Context, f fault, rec faultRecord) (faultRecord, error) {
	name := fmt.Sprintf("m%d", f.Member)
	node, detail, err := c.pickNode(ctx, f.Role)
	if err != nil {
		return rec, err
	}
	rec.Target, rec.Detail = fmt.Sprintf("%s, node %d", name, node), detail
	c.mu.Lock()
	p := c.procs[name]
	p.expected = true
	c.mu.Unlock()
	t0 := time.Now()
	c.countGaps(false)
	if err := c.cluster.KillNode(ctx, node); err != nil {
		return rec, err
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return rec, err
	}
	if err := c.waitFor(name+" exiting after SIGKILL with the node down", func() bool { return exited(p) }); err != nil {
		return rec, err
	}
	// -outage: the node stays down that long after the member died (a
	// fault's shape, not a synchronisation).
	if err := c.pace(t0, c.outage); err != nil {
		return rec, err
	}
	if err := c.cluster.RestartNode(ctx, node); err != nil {
		return rec, err
	}
	if err := c.cluster.WaitHealthy(ctx, c.timeout); err != nil {
		return rec, err
	}
	c.countGaps(true)
	rec.Detail += fmt.Sprintf("; node down %.1fs, cluster healthy again", time.Since(t0).Seconds())
	if _, err := c.startMember(f.Member); err != nil {
		return rec, err
	}
	since := time.Now()
	if err := c.waitFor("every partition running after "+rec.Fault, func() bool { return c.allRunning(since, "", true) }); err != nil {
		return rec, err
	}
	rec.RecoverSeconds = time.Since(t0).Seconds()
	return rec, nil
}

// pickNode chooses the node a broker kill aims at: one holding role (the
// active controller, or a leader of a coordinator topic's partition) that
// was not killed yet in this round, else any node not killed yet.
func (c *chaos) pickNode(ctx context.Context, role string) (int, string, error) {
	if c.killed == nil || len(c.killed) >= c.nodes {
		c.killed = map[int]bool{}
	}
	killed := c.killed
	l, err := c.cluster.Leaders(ctx)
	if err != nil {
		return 0, "", err
	}
	roles := map[int][]string{}
	roles[l.Controller] = append(roles[l.Controller], roleController)
	for tp, leader := range l.Partitions {
		switch {
		case strings.HasPrefix(tp, "__transaction_state/"):
			roles[leader] = append(roles[leader], "leader of "+tp)
		case strings.HasPrefix(tp, "__consumer_offsets/"):
			roles[leader] = append(roles[leader], "leader of "+tp)
		}
	}
	holds := func(n int) bool {
		for _, r := range roles[n] {
			switch role {
			case roleController:
				if r == roleController {
					return true
				}
			case roleTxnLeader:
				if strings.Contains(r, "__transaction_state") {
					return true
				}
			case roleOffsLeader:
				if strings.Contains(r, "__consumer_offsets") {
					return true
				}
			}
		}
		return false
	}
	pick := -1
	for n := range c.nodes {
		if !killed[n] && holds(n) {
			pick = n
			break
		}
	}
	if pick < 0 {
		for n := range c.nodes {
			if !killed[n] {
				pick = n
				break
			}
		}
	}
	killed[pick] = true
	rs := roles[pick]
	slices.Sort(rs)
	detail := " (holds: nothing)"
	if len(rs) > 0 {
		detail = " (holds: " + strings.Join(rs, ", ") + ")"
	}
	return pick, detail, nil
}
