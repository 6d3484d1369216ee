//go:build it

package kafkatest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store/kafka"
)

// txnOutcome is what the producer knows of one of its transactions.
type txnOutcome int

const (
	// txnCommitted: EndTransaction(commit) succeeded; every record must
	// be read, once.
	txnCommitted txnOutcome = iota
	// txnNeverCommitted: a produce failed and no commit was asked for;
	// no record may be read.
	txnNeverCommitted
	// txnUncertain: the commit was asked for and failed; the records are
	// read all or none.
	txnUncertain
)

// recordsPerTxn is how many records each transaction writes.
const recordsPerTxn = 10

// txnProducer writes transactions of recordsPerTxn records to one
// partition, one at a time under one transactional id, until stopped; a
// transaction that fails is followed by a fresh client (its
// InitProducerID ends whatever the old one left).
type txnProducer struct {
	t     *testing.T
	seeds []string
	topic string

	mu       sync.Mutex
	outcomes []txnOutcome
	begun    []time.Time // when each transaction began
	failures []string
}

func (p *txnProducer) client() (*kgo.Client, error) {
	return kgo.NewClient(
		kgo.SeedBrokers(p.seeds...),
		kgo.TransactionalID(p.topic+"-txn"),
		kgo.DefaultProduceTopic(p.topic),
		kgo.TransactionTimeout(time.Minute),
	)
}

// run produces until ctx is done, or until stop is closed and its last
// transaction committed (so none is left open: the next transaction's
// InitProducerID ends a failed one).
func (p *txnProducer) run(ctx context.Context, stop <-chan struct{}) {
	cl, err := p.client()
	if err != nil {
		p.t.Errorf("producer client: %v", err)
		return
	}
	defer func() { cl.Close() }()
	last := txnCommitted
	for id := 0; ctx.Err() == nil; id++ {
		select {
		case <-stop:
			if last == txnCommitted {
				return
			}
		default:
		}
		begun := time.Now()
		outcome, err := p.one(ctx, cl, id)
		last = outcome
		p.mu.Lock()
		p.outcomes = append(p.outcomes, outcome)
		p.begun = append(p.begun, begun)
		if err != nil {
			p.failures = append(p.failures, fmt.Sprintf("txn %d: %v", id, err))
		}
		p.mu.Unlock()
		if outcome != txnCommitted {
			cl.Close()
			if cl, err = p.client(); err != nil {
				p.t.Errorf("producer client: %v", err)
				return
			}
		}
	}
}

// one writes transaction id.
func (p *txnProducer) one(ctx context.Context, cl *kgo.Client, id int) (txnOutcome, error) {
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		return txnNeverCommitted, fmt.Errorf("begin: %w", err)
	}
	recs := make([]*kgo.Record, recordsPerTxn)
	for j := range recs {
		recs[j] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", j), Value: fmt.Appendf(nil, "%d/%d", id, j)}
	}
	if err := cl.ProduceSync(tctx, recs...).FirstErr(); err != nil {
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer acancel()
		_ = cl.EndTransaction(actx, kgo.TryAbort)
		return txnNeverCommitted, fmt.Errorf("produce: %w", err)
	}
	if err := cl.EndTransaction(tctx, kgo.TryCommit); err != nil {
		return txnUncertain, fmt.Errorf("commit: %w", err)
	}
	return txnCommitted, nil
}

func (p *txnProducer) committed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed0()
}

// waitCommitted returns once n transactions committed, or fails the test
// after timeout.
func (p *txnProducer) waitCommitted(t *testing.T, n int, timeout time.Duration, what string) time.Duration {
	t.Helper()
	t0 := time.Now()
	for p.committed() < n {
		if time.Since(t0) > timeout {
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("%s: %d of %d transactions committed after %v; failures: %v", what, p.committed0(), n, timeout, p.failures)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(t0)
}

// waitBegunAndCommitted returns once a transaction begun after t0
// committed, or fails the test after timeout.
func (p *txnProducer) waitBegunAndCommitted(t *testing.T, t0 time.Time, timeout time.Duration, what string) time.Duration {
	t.Helper()
	for {
		p.mu.Lock()
		for i, o := range p.outcomes {
			if o == txnCommitted && p.begun[i].After(t0) {
				p.mu.Unlock()
				return time.Since(t0)
			}
		}
		if time.Since(t0) > timeout {
			defer p.mu.Unlock()
			t.Fatalf("%s: no transaction begun since %v committed after %v; failures: %v", what, t0, timeout, p.failures)
		}
		p.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// committed0 is committed with p.mu held.
func (p *txnProducer) committed0() int {
	n := 0
	for _, o := range p.outcomes {
		if o == txnCommitted {
			n++
		}
	}
	return n
}

// TestClusterTransactionsSurviveALeaderKill: on the replicated cluster
// (`make it-cluster`), transactions written to a partition of three
// replicas while its leader is SIGKILLed, while it is down, and after it
// came back and the cluster is healthy again are all read back by a
// read_committed consumer, each committed one whole and once, none that
// was never committed, and an uncertain one (its commit failed) whole or
// not at all.
func TestClusterTransactionsSurviveALeaderKill(t *testing.T) {
	c := kafkatest.ClusterFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	topic := fmt.Sprintf("kafkatest-cluster-%d", time.Now().UnixNano())
	if err := kafka.CreateTopic(ctx, admin, topic, 1, 3, nil); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := adm.DeleteTopics(context.Background(), topic); err != nil {
			t.Errorf("delete topic %s: %v", topic, err)
		}
	}()
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if pd := details[topic].Partitions[0]; len(pd.Replicas) != 3 || len(pd.ISR) != 3 {
		t.Fatalf("%s/0: replicas %v, isr %v; want three of each", topic, pd.Replicas, pd.ISR)
	}

	p := &txnProducer{t: t, seeds: c.Brokers, topic: topic}
	stopc := make(chan struct{})
	stop := sync.OnceFunc(func() { close(stopc) })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.run(ctx, stopc)
	}()
	defer func() {
		stop()
		if t.Failed() {
			cancel() // no waiting for a last commit on a broken cluster
		}
		wg.Wait()
	}()

	const step = 20
	p.waitCommitted(t, step, time.Minute, "before the kill")
	before, err := c.Leaders(ctx, topic, "__consumer_offsets", "__transaction_state")
	if err != nil {
		t.Fatal(err)
	}
	victim, ok := before.Partitions[topic+"/0"]
	if !ok || victim < 0 {
		t.Fatalf("no leader of %s/0: %+v", topic, before)
	}
	t.Logf("leaders before the kill: controller %d, %+v", before.Controller, before.Partitions)

	killed := p.committed()
	t0 := time.Now()
	if err := c.KillNode(ctx, victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d (leader of %s/0) SIGKILLed at %d committed transactions", victim, topic, killed)
	d := p.waitBegunAndCommitted(t, t0, 2*time.Minute, "with the leader down")
	t.Logf("the first transaction begun after the kill committed %v after it", d)
	p.waitCommitted(t, killed+step, 2*time.Minute, "with the leader down")
	during, err := c.Leaders(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if l := during.Partitions[topic+"/0"]; l < 0 || l == victim {
		t.Fatalf("leader of %s/0 with node %d down: %d", topic, victim, l)
	}
	t.Logf("%d transactions committed with node %d down; leaders %+v, controller %d", p.committed()-killed, victim, during.Partitions, during.Controller)

	t1 := time.Now()
	if err := c.RestartNode(ctx, victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d serves again %v after its restart", victim, time.Since(t1))
	if err := c.WaitHealthy(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster healthy %v after the restart (%v after the kill)", time.Since(t1), time.Since(t0))
	details, err = adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if pd := details[topic].Partitions[0]; len(pd.ISR) != 3 {
		t.Fatalf("%s/0 after wait-healthy: isr %v; want all three", topic, pd.ISR)
	}

	p.waitCommitted(t, p.committed()+step, 2*time.Minute, "after the restart")
	stop()
	wg.Wait()

	p.mu.Lock()
	outcomes := p.outcomes
	t.Logf("%d transactions: %d committed; failures: %v", len(outcomes), p.committed0(), p.failures)
	p.mu.Unlock()

	// Read back everything below the log end, read_committed.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		t.Fatalf("end offset of %s/0: %+v", topic, end)
	}
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	seen := make([][]int, len(outcomes)) // per transaction, the record indexes read, in order
	lastID := -1
	err = kafkatest.ReadTo(consumer, end.Offset, func(r *kgo.Record) {
		if r.Attrs.IsControl() {
			return
		}
		var id, j int
		if _, err := fmt.Sscanf(string(r.Value), "%d/%d", &id, &j); err != nil || id < 0 || id >= len(outcomes) {
			t.Errorf("offset %d: unexpected record %q", r.Offset, r.Value)
			return
		}
		if id < lastID {
			t.Errorf("offset %d: transaction %d after %d", r.Offset, id, lastID)
		}
		lastID = id
		seen[id] = append(seen[id], j)
	})
	if err != nil {
		t.Fatalf("read to %d: %v", end.Offset, err)
	}
	var committed, uncertainIn, uncertainOut int
	for id, o := range outcomes {
		whole := len(seen[id]) == recordsPerTxn
		for j := 0; whole && j < recordsPerTxn; j++ {
			whole = seen[id][j] == j
		}
		switch {
		case o == txnCommitted && !whole:
			t.Errorf("committed transaction %d read as %v; want each of its %d records once, in order", id, seen[id], recordsPerTxn)
		case o == txnCommitted:
			committed++
		case o == txnNeverCommitted && len(seen[id]) > 0:
			t.Errorf("transaction %d was never committed, but %v of it was read", id, seen[id])
		case o == txnUncertain && len(seen[id]) > 0 && !whole:
			t.Errorf("uncertain transaction %d read in part: %v", id, seen[id])
		case o == txnUncertain && whole:
			uncertainIn++
		case o == txnUncertain:
			uncertainOut++
		}
	}
	t.Logf("read to offset %d: %d committed transactions whole (%d records), uncertain ones %d read, %d not", end.Offset, committed, committed*recordsPerTxn, uncertainIn, uncertainOut)
}
