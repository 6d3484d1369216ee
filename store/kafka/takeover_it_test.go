//go:build it

package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// The crashed owner runs as this test binary re-executed: it opens a
// transaction under the partition's transactional.id, writes a snapshot,
// says so on stdout and waits to be killed.
const crashedOwnerEnv = "SNAPFENCE_CRASHED_OWNER"

func TestCrashedOwnerProcess(t *testing.T) {
	spec := os.Getenv(crashedOwnerEnv)
	if spec == "" {
		return // only as the child of TestTakeoverAfterSIGKILLOnKafka
	}
	txnID, topic, _ := strings.Cut(spec, " ")
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers(t)...), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	rec := wire.EncodeSnapshot("", store.Snapshot{Key: []byte("k"), Value: []byte("unfinished"), Offset: 9})
	if err := cl.ProduceSync(context.Background(), toKgo(store.TopicPartition{Topic: topic}, []wire.Record{rec})...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("IN TRANSACTION")
	select {} // until SIGKILL
}

// A process killed with SIGKILL in the middle of a transaction: the next
// owner's acquisition aborts it, and its recovery is complete at once, not
// after the one-minute transaction timeout.
func TestTakeoverAfterSIGKILLOnKafka(t *testing.T) {
	w := newRealWorld(t)
	p := w.partition(time.Minute, nil)
	ctx := context.Background()
	if err := writeOne(ctx, p, store.Snapshot{Key: []byte("k"), Value: []byte("committed"), Offset: 1}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	txnID := fmt.Sprintf("%s-%s-%d", w.input.Topic, w.input.Topic, w.input.Partition)

	child := exec.Command(os.Args[0], "-test.run=^TestCrashedOwnerProcess$", "-test.v")
	child.Env = append(os.Environ(), crashedOwnerEnv+"="+txnID+" "+w.snaps.Topic)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.Contains(lines.Text(), "IN TRANSACTION") {
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	child.Wait()
	lso, hw := w.offsets()
	if lso >= hw {
		t.Fatalf("the killed owner left no open transaction (lso %d, hw %d)", lso, hw)
	}

	start := time.Now()
	next := w.partition(time.Minute, nil)
	r := collectSnaps(next)
	took := time.Since(start)
	if r.err != nil || strings.Join(r.keys, ",") != "k=committed" {
		t.Fatalf("recovered %v (%v), want k=committed", r.keys, r.err)
	}
	if took > 20*time.Second {
		t.Fatalf("takeover and recovery took %s: it waited for the transaction timeout", took)
	}
	t.Logf("takeover and recovery after SIGKILL: %s", took)
}

func (w *realWorld) offsets() (lso, hw int64) {
	w.t.Helper()
	ctx := context.Background()
	ends, err := w.adm.ListEndOffsets(ctx, w.snaps.Topic)
	if err != nil {
		w.t.Fatal(err)
	}
	committed, err := w.adm.ListCommittedOffsets(ctx, w.snaps.Topic)
	if err != nil {
		w.t.Fatal(err)
	}
	e, _ := ends.Lookup(w.snaps.Topic, 0)
	c, _ := committed.Lookup(w.snaps.Topic, 0)
	return c.Offset, e.Offset
}
