package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// fakeTxns records batches and can hold a transaction in flight.
type fakeTxns struct {
	mu      sync.Mutex
	batches []Batch
	hold    chan struct{}
	entered chan struct{}
	fail    error
}

func (f *fakeTxns) exec(ctx context.Context, b Batch) (store.GroupIdentity, error) {
	f.mu.Lock()
	hold, entered := f.hold, f.entered
	f.hold = nil
	f.batches = append(f.batches, b)
	f.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return store.GroupIdentity{Group: "g", MemberID: "m", Generation: 1}, f.fail
}

func (f *fakeTxns) holdNext() (<-chan struct{}, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hold := make(chan struct{})
	f.hold, f.entered = hold, make(chan struct{}, 1)
	return f.entered, func() { close(hold) }
}

func (f *fakeTxns) shape() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.batches {
		s := ""
		for _, w := range b.Writes {
			s += string(w.Key)
		}
		if b.Advances {
			s += fmt.Sprintf("+commit@%d", b.Offset)
		} else {
			s += fmt.Sprintf("@%d", b.Offset)
		}
		out = append(out, s)
	}
	return fmt.Sprint(out)
}

var tp = store.TopicPartition{Topic: "in", Partition: 0}

func write(c *Committer, key string, off int64) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ch <- writeOne(c, context.Background(), store.Snapshot{Key: []byte(key), Value: []byte("v"), Offset: off})
	}()
	return ch
}

func commit(c *Committer, offset int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.Commit(context.Background(), offset) }()
	return ch
}

// writeOne is one write: a batch of one snapshot.
func writeOne(c *Committer, ctx context.Context, s store.Snapshot) error {
	return c.WriteBatch(ctx, []store.Snapshot{s})[0]
}

func TestLoneWriteCommitsAtOnceWithSeededOffset(t *testing.T) {
	f := &fakeTxns{}
	c := New(context.Background(), Config{Input: tp, AssignedOffset: 17}, f.exec)
	if err := writeOne(c, context.Background(), store.Snapshot{Key: []byte("a"), Value: []byte("v"), Offset: 20}); err != nil {
		t.Fatal(err)
	}
	if got := f.shape(); got != "[a@17]" {
		t.Fatalf("batches = %s, want [a@17]", got)
	}
}

// The script: a is in flight; b c d, a commit of 5, then e queue; cap 2.
// Batches: [a] [b c] [d +commit@5] [e]: the commit queued after the cap
// was reached waits for the next batch, and rides in it without using the
// cap; e, queued after the commit, does not ride with it (the commit's
// position is as of its own end).
func TestQueuedWritesDrainInCappedFIFOBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 2}, f.exec)
		entered, release := f.holdNext()
		results := []<-chan error{write(c, "a", 0)}
		<-entered
		for i, k := range []string{"b", "c", "d"} {
			results = append(results, write(c, k, int64(i+1)))
			synctest.Wait()
		}
		results = append(results, commit(c, 5))
		synctest.Wait()
		results = append(results, write(c, "e", 4))
		synctest.Wait()
		release()
		for _, r := range results {
			if err := <-r; err != nil {
				t.Fatal(err)
			}
		}
		if got, want := f.shape(), "[a@0 bc@0 d+commit@5 e@5]"; got != want {
			t.Fatalf("batches = %s, want %s", got, want)
		}
		if c.Committed() != 5 {
			t.Fatalf("committed = %d, want 5", c.Committed())
		}
	})
}

func TestFailureReachesEveryWaiterOfTheBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp}, f.exec)
		entered, release := f.holdNext()
		first := write(c, "a", 0)
		<-entered
		b, d := write(c, "b", 1), write(c, "d", 2)
		cm := commit(c, 3)
		synctest.Wait()
		boom := errors.New("boom")
		f.mu.Lock()
		f.fail = boom
		f.mu.Unlock()
		release()
		for _, r := range []<-chan error{first, b, d, cm} {
			if err := <-r; !errors.Is(err, boom) {
				t.Fatalf("err = %v, want boom", err)
			}
		}
		if c.Committed() != 0 {
			t.Fatalf("a failed commit advanced the committed offset to %d", c.Committed())
		}
	})
}

func TestCancelledWaiterLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp}, f.exec)
		entered, release := f.holdNext()
		first := write(c, "a", 0)
		<-entered
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() { gone <- writeOne(c, ctx, store.Snapshot{Key: []byte("x"), Value: []byte("v")}) }()
		synctest.Wait()
		later := write(c, "b", 1)
		synctest.Wait()
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled write: %v", err)
		}
		release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-later; err != nil {
			t.Fatal(err)
		}
		if got := f.shape(); got != "[a@0 b@0]" {
			t.Fatalf("batches = %s: the cancelled write must not be committed", got)
		}
	})
}

// Waiters that give up at random points (while queued, while handed the
// transaction, while in flight) never strand the others, and every write
// that reported success was committed exactly once.
func TestRandomCancellationsNeverStrandWaiters(t *testing.T) {
	var mu sync.Mutex
	committed := map[string]int{}
	exec := func(ctx context.Context, b Batch) (store.GroupIdentity, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range b.Writes {
			committed[string(w.Key)]++
		}
		return store.GroupIdentity{}, nil
	}
	c := New(context.Background(), Config{Input: tp, MaxWrites: 4}, exec)
	var wg sync.WaitGroup
	ok := make(chan string, 2000)
	for i := range 2000 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			if i%3 == 0 {
				cancel()
			} else if i%3 == 1 {
				go cancel()
			}
			key := fmt.Sprint(i)
			if err := writeOne(c, ctx, store.Snapshot{Key: []byte(key), Value: []byte("v")}); err == nil {
				ok <- key
			}
			cancel()
		})
	}
	wg.Wait()
	close(ok)
	mu.Lock()
	defer mu.Unlock()
	for key := range ok {
		if committed[key] != 1 {
			t.Fatalf("write %s reported success but was committed %d times", key, committed[key])
		}
	}
	for key, n := range committed {
		if n != 1 {
			t.Fatalf("write %s committed %d times", key, n)
		}
	}
}

func TestCloseFailsQueuedAndWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp}, f.exec)
		entered, release := f.holdNext()
		first := write(c, "a", 0)
		<-entered
		queued := write(c, "b", 1)
		synctest.Wait()
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		if err := <-queued; !errors.Is(err, store.ErrClosed) {
			t.Fatalf("queued write after Close: %v, want ErrClosed", err)
		}
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned with a transaction in flight")
		default:
		}
		release()
		<-closed
		if err := <-first; err != nil {
			t.Fatalf("in-flight write: %v", err)
		}
		if err := writeOne(c, context.Background(), store.Snapshot{Key: []byte("c")}); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("write after Close: %v", err)
		}
	})
}

func TestStagedOffsetNeverMovesBack(t *testing.T) {
	f := &fakeTxns{}
	c := New(context.Background(), Config{Input: tp, AssignedOffset: 10}, f.exec)
	if err := c.Commit(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if got := f.shape(); got != "[+commit@10]" {
		t.Fatalf("batches = %s, want the seeded 10 kept", got)
	}
}

func TestWriteChecksBeforeQueueing(t *testing.T) {
	f := &fakeTxns{}
	c := New(context.Background(), Config{Input: tp, MaxValueBytes: 8}, f.exec)
	err := writeOne(c, context.Background(), store.Snapshot{Key: []byte("key"), Value: []byte("123456"), Offset: 1})
	var tl *store.ValueTooLargeError
	if !errors.As(err, &tl) || tl.Size != 9 || tl.Limit != 8 || string(tl.Key) != "key" {
		t.Fatalf("err = %v, want ValueTooLargeError{key, 9, 8}", err)
	}
	if f.shape() != "[]" {
		t.Fatal("an oversize write reached a transaction")
	}
}

func snaps(keys ...string) []store.Snapshot {
	out := make([]store.Snapshot, len(keys))
	for i, k := range keys {
		out[i] = store.Snapshot{Key: []byte(k), Value: []byte("v"), Offset: int64(i)}
	}
	return out
}

func writeBatch(ctx context.Context, c *Committer, s []store.Snapshot) <-chan []error {
	ch := make(chan []error, 1)
	go func() { ch <- c.WriteBatch(ctx, s) }()
	return ch
}

func mustAllNil(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("errs[%d] = %v", i, err)
		}
	}
}

// A batch on an idle committer leads at once and drains itself in order,
// in transactions of the cap.
func TestWriteBatchDrainsInOrderInCappedBatches(t *testing.T) {
	f := &fakeTxns{}
	c := New(context.Background(), Config{Input: tp, MaxWrites: 2}, f.exec)
	errs := c.WriteBatch(context.Background(), snaps("a", "b", "c", "d", "e"))
	if len(errs) != 5 {
		t.Fatalf("%d errors for 5 writes", len(errs))
	}
	mustAllNil(t, errs)
	if got, want := f.shape(), "[ab@0 cd@0 e@0]"; got != want {
		t.Fatalf("batches = %s, want %s", got, want)
	}
	if c.Pending() != 0 {
		t.Fatalf("%d entries left queued", c.Pending())
	}
}

// The same calls give the same transactions, run after run: a batch is
// never split by the scheduler, unlike concurrent Writes.
func TestWriteBatchIsTheSameEveryRun(t *testing.T) {
	var first string
	for range 50 {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 3}, f.exec)
		mustAllNil(t, c.WriteBatch(context.Background(), snaps("a", "b", "c", "d", "e", "f", "g")))
		if err := c.Commit(context.Background(), 7); err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = f.shape()
		}
		if got := f.shape(); got != first || got != "[abc@0 def@0 g@0 +commit@7]" {
			t.Fatalf("batches = %s, want [abc@0 def@0 g@0 +commit@7] every run (first run: %s)", got, first)
		}
	}
}

// A batch queues as a whole behind the transaction in flight, with no
// other write between its entries: a single write issued while it waits
// queues after it, one issued before it, before it. The cap holds, and a
// commit queued after the batch never leads its writes (I2).
func TestWriteBatchQueuesWholeAmongSingleWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 3}, f.exec)
		entered, release := f.holdNext()
		first := write(c, "a", 0)
		<-entered
		before := write(c, "x", 9)
		synctest.Wait()
		batch := writeBatch(context.Background(), c, snaps("b", "c", "d", "e", "f"))
		synctest.Wait()
		if c.Pending() != 6 {
			t.Fatalf("pending = %d, want x and the batch of 5", c.Pending())
		}
		after := write(c, "y", 9)
		synctest.Wait()
		cm := commit(c, 6)
		synctest.Wait()
		release()
		for _, ch := range []<-chan error{first, before, after, cm} {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		mustAllNil(t, <-batch)
		if got, want := f.shape(), "[a@0 xbc@0 def@0 y+commit@6]"; got != want {
			t.Fatalf("batches = %s, want %s", got, want)
		}
	})
}

// A write refused by wire.CheckWrite fails alone and is never queued; a
// failed transaction fails exactly the writes it carried.
func TestWriteBatchErrorsPerEntry(t *testing.T) {
	boom := errors.New("boom")
	var mu sync.Mutex
	var batches [][]string
	exec := func(ctx context.Context, b Batch) (store.GroupIdentity, error) {
		mu.Lock()
		defer mu.Unlock()
		var keys []string
		var err error
		for _, w := range b.Writes {
			keys = append(keys, string(w.Key))
			if string(w.Key) == "d" {
				err = boom
			}
		}
		batches = append(batches, keys)
		return store.GroupIdentity{}, err
	}
	c := New(context.Background(), Config{Input: tp, MaxWrites: 2, MaxValueBytes: 8}, exec)
	in := snaps("a", "b", "big", "c", "reserved", "d", "neg", "e", "f")
	in[2].Value = []byte("123456789")
	in[4].Key = wire.OffsetMarkerKey
	in[6].Offset = -1
	errs := c.WriteBatch(context.Background(), in)
	var tl *store.ValueTooLargeError
	checks := []func(error) bool{
		func(err error) bool { return err == nil },                           // a
		func(err error) bool { return err == nil },                           // b
		func(err error) bool { return errors.As(err, &tl) },                  // big
		func(err error) bool { return errors.Is(err, boom) },                 // c: in d's transaction
		func(err error) bool { return errors.Is(err, store.ErrReservedKey) }, // reserved
		func(err error) bool { return errors.Is(err, boom) },                 // d
		func(err error) bool { return err != nil && !errors.Is(err, boom) },  // neg: refused before queueing
		func(err error) bool { return err == nil },                           // e
		func(err error) bool { return err == nil },                           // f
	}
	for i, ok := range checks {
		if !ok(errs[i]) {
			t.Fatalf("%s: err = %v", in[i].Key, errs[i])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := fmt.Sprint(batches), "[[a b] [c d] [e f]]"; got != want {
		t.Fatalf("transactions = %s, want %s: refused writes never queue", got, want)
	}
}

// A batch whose context ends while it waits behind another transaction
// leaves the queue whole: none of it is committed, every write reports
// the context's error, and the transaction is not stranded.
func TestWriteBatchCancelledWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 2}, f.exec)
		entered, release := f.holdNext()
		first := write(c, "a", 0)
		<-entered
		ctx, cancel := context.WithCancel(context.Background())
		batch := writeBatch(ctx, c, snaps("b", "c", "d"))
		synctest.Wait()
		later := write(c, "e", 4)
		synctest.Wait()
		cancel()
		errs := <-batch
		for i, err := range errs {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("errs[%d] = %v, want context.Canceled", i, err)
			}
		}
		if c.Pending() != 1 {
			t.Fatalf("pending = %d, want only e", c.Pending())
		}
		release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-later; err != nil {
			t.Fatal(err)
		}
		if got, want := f.shape(), "[a@0 e@0]"; got != want {
			t.Fatalf("batches = %s, want %s: the cancelled batch must not be committed", got, want)
		}
	})
}

// A batch cancelled while part of it is in another leader's transaction:
// the writes in flight report the context's error (their outcome is
// unknown to the caller, who must treat them as not durable), the rest
// leave the queue and are never committed, and the transaction passes on.
func TestWriteBatchCancelledPartlyInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 3}, f.exec)
		entered, release := f.holdNext()
		first := write(c, "a", 0)
		<-entered
		x := write(c, "x", 9)
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		batch := writeBatch(ctx, c, snaps("b", "c", "d"))
		synctest.Wait()
		later := write(c, "e", 4)
		synctest.Wait()
		// a's leader hands the transaction to x, which takes x, b and c;
		// hold that one.
		entered, release2 := f.holdNext()
		release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		<-entered
		cancel()
		errs := <-batch
		for i, err := range errs {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("errs[%d] = %v, want context.Canceled", i, err)
			}
		}
		release2()
		if err := <-x; err != nil {
			t.Fatal(err)
		}
		if err := <-later; err != nil {
			t.Fatal(err)
		}
		if got, want := f.shape(), "[a@0 xbc@0 e@0]"; got != want {
			t.Fatalf("batches = %s, want %s: d left the queue", got, want)
		}
	})
}

func TestWriteBatchAfterAndDuringClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 2}, f.exec)
		entered, release := f.holdNext()
		first := write(c, "a", 0)
		<-entered
		batch := writeBatch(context.Background(), c, snaps("b", "c"))
		synctest.Wait()
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		for i, err := range <-batch {
			if !errors.Is(err, store.ErrClosed) {
				t.Fatalf("queued errs[%d] = %v, want ErrClosed", i, err)
			}
		}
		release()
		<-closed
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		for i, err := range c.WriteBatch(context.Background(), snaps("d", "e")) {
			if !errors.Is(err, store.ErrClosed) {
				t.Fatalf("errs[%d] after Close = %v, want ErrClosed", i, err)
			}
		}
		if got := f.shape(); got != "[a@0]" {
			t.Fatalf("batches = %s, want [a@0]", got)
		}
	})
}

// Started back to back while a transaction is in flight: a (in flight,
// failing), b, a started commit of 5, then c. Cap 1. a's transaction
// fails after the commit was queued; the commit, reaching a transaction
// after a's failure, is refused with ErrEarlierWriteFailed, and b and c
// still go ([b] [c]): the failed write is never committed past. A
// blocking Commit queued at the end is not dependent and commits.
func TestAStartedCommitIsRefusedAfterAnEarlierWriteFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		failA := func(ctx context.Context, b Batch) (store.GroupIdentity, error) {
			id, err := f.exec(ctx, b)
			if len(b.Writes) > 0 && string(b.Writes[0].Key) == "a" {
				err = errors.New("a's transaction failed")
			}
			return id, err
		}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 1}, failA)
		entered, release := f.holdNext()
		ctx := context.Background()
		a := c.StartWriteBatch(ctx, []store.Snapshot{{Key: []byte("a"), Value: []byte("v"), Offset: 1}})
		<-entered
		b := c.StartWriteBatch(ctx, []store.Snapshot{{Key: []byte("b"), Value: []byte("v"), Offset: 2}})
		cm := c.StartCommit(ctx, 5)
		cw := c.StartWriteBatch(ctx, []store.Snapshot{{Key: []byte("c"), Value: []byte("v"), Offset: 3}})
		release()
		if errs := a.Wait(ctx); errs[0] == nil {
			t.Fatal("a's write succeeded")
		}
		if errs := b.Wait(ctx); errs[0] != nil {
			t.Fatalf("b's write: %v", errs[0])
		}
		if errs := cm.Wait(ctx); !errors.Is(errs[0], store.ErrEarlierWriteFailed) {
			t.Fatalf("the started commit: %v, want ErrEarlierWriteFailed", errs)
		}
		if errs := cw.Wait(ctx); errs[0] != nil {
			t.Fatalf("c's write: %v", errs[0])
		}
		if c.Committed() != 0 {
			t.Fatalf("committed %d past a failed write", c.Committed())
		}
		if got, want := f.shape(), "[a@0 b@0 c@0]"; got != want {
			t.Fatalf("batches = %s, want %s: the refused commit is in none", got, want)
		}
		if err := c.Commit(ctx, 5); err != nil || c.Committed() != 5 {
			t.Fatalf("Commit after the failure: %v, committed %d; want 5 (Commit does not depend)", err, c.Committed())
		}
	})
}

// sized is a write of key whose record (wire.SnapshotBytes) is n bytes.
func sized(key string, n int, off int64) store.Snapshot {
	s := store.Snapshot{Key: []byte(key), Offset: off}
	s.Value = make([]byte, n-wire.SnapshotBytes(s))
	return s
}

// bytesOf is the bytes of each recorded transaction's writes.
func (f *fakeTxns) bytesOf() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, b := range f.batches {
		n := 0
		for _, w := range b.Writes {
			n += wire.SnapshotBytes(w)
		}
		out = append(out, n)
	}
	return out
}

// The byte cap cuts a batch the count cap would not: writes of 100 bytes
// under a cap of 250 bytes go two by two, and a commit queued after the
// write that did not fit waits with it for the next transaction (I2). No
// transaction carries more than the cap (I8).
func TestQueuedWritesDrainInByteCappedBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 100, MaxBytes: 250}, f.exec)
		entered, release := f.holdNext()
		results := []<-chan error{writeSnap(c, sized("a", 100, 0))}
		<-entered
		for i, k := range []string{"b", "c", "d"} {
			results = append(results, writeSnap(c, sized(k, 100, int64(i+1))))
			synctest.Wait()
		}
		results = append(results, commit(c, 5))
		synctest.Wait()
		results = append(results, writeSnap(c, sized("e", 100, 4)))
		synctest.Wait()
		release()
		for _, r := range results {
			if err := <-r; err != nil {
				t.Fatal(err)
			}
		}
		if got, want := f.shape(), "[a@0 bc@0 d+commit@5 e@5]"; got != want {
			t.Fatalf("batches = %s, want %s", got, want)
		}
		for _, n := range f.bytesOf() {
			if n > 250 {
				t.Fatalf("a transaction carried %d bytes, cap 250 (all: %v)", n, f.bytesOf())
			}
		}
	})
}

// A write of exactly the cap fills a transaction; one byte over and it
// waits for the next.
func TestByteCapIsInclusive(t *testing.T) {
	f := &fakeTxns{}
	c := New(context.Background(), Config{Input: tp, MaxWrites: 100, MaxBytes: 300}, f.exec)
	mustAllNil(t, c.WriteBatch(context.Background(), []store.Snapshot{
		sized("a", 100, 0), sized("b", 200, 1), sized("c", 100, 2), sized("d", 201, 3),
	}))
	if got, want := fmt.Sprint(f.bytesOf()), "[300 100 201]"; got != want {
		t.Fatalf("bytes per transaction = %s, want %s", got, want)
	}
}

// A write larger than the byte cap is neither refused nor stuck: it goes
// in a transaction of its own, the writes before it in theirs and the
// ones after it in the next; alone on an idle committer, it commits at
// once.
func TestOversizeWriteGoesAlone(t *testing.T) {
	f := &fakeTxns{}
	c := New(context.Background(), Config{Input: tp, MaxWrites: 100, MaxBytes: 250}, f.exec)
	if err := writeOne(c, context.Background(), sized("X", 1000, 0)); err != nil {
		t.Fatalf("a lone write over the byte cap: %v", err)
	}
	errs := c.WriteBatch(context.Background(), []store.Snapshot{
		sized("a", 100, 1), sized("B", 1000, 2), sized("c", 100, 3), sized("d", 100, 4), sized("E", 251, 5),
	})
	mustAllNil(t, errs)
	if got, want := f.shape(), "[X@0 a@0 B@0 cd@0 E@0]"; got != want {
		t.Fatalf("batches = %s, want %s", got, want)
	}
	if c.Pending() != 0 {
		t.Fatalf("%d entries left queued", c.Pending())
	}
}

// Mixed sizes batch the same way on every run: the byte cap reads only
// the queue.
func TestByteCappedWriteBatchIsTheSameEveryRun(t *testing.T) {
	sizes := []int{120, 80, 50, 200, 50, 50, 60, 300, 60, 90, 70}
	var in []store.Snapshot
	for i, n := range sizes {
		in = append(in, sized(string(rune('a'+i)), n, int64(i)))
	}
	for range 50 {
		f := &fakeTxns{}
		c := New(context.Background(), Config{Input: tp, MaxWrites: 3, MaxBytes: 250}, f.exec)
		mustAllNil(t, c.WriteBatch(context.Background(), in))
		// abc: 250 (also the count cap); de: 250, f would make 300; fg:
		// 110, h would make 410; h alone (300); ijk: 220 (the count cap).
		if got, want := f.shape(), "[abc@0 de@0 fg@0 h@0 ijk@0]"; got != want {
			t.Fatalf("batches = %s, want %s", got, want)
		}
	}
}

func writeSnap(c *Committer, s store.Snapshot) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- writeOne(c, context.Background(), s) }()
	return ch
}
