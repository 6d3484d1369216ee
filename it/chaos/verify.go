package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// verify waits for the quiet (every partition committed to the input's
// end), then checks the state, the outputs, the snapshots' order, the
// transactions and the offsets, filling mr.
func (c *chaos) verify(ctx context.Context, adm *kadm.Client, mr *modeReport) error {
	group := c.topic + "-group"
	ends, err := adm.ListEndOffsets(ctx, c.topic)
	if err != nil {
		return err
	}
	if err := ends.Error(); err != nil {
		return err
	}
	inputEnd := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { inputEnd[o.Partition] = o.Offset })

	// (5) Every partition's committed offset at the input's end, observed.
	// Polled (the group's commits are not pushed to anyone), bounded.
	t0 := time.Now()
	var behind []string
	for {
		if err := c.reviveDead(); err != nil {
			return err
		}
		behind = behind[:0]
		committed, ferr := adm.FetchOffsets(kadm.RequireStable(ctx), group)
		for p := range c.partitions {
			got := int64(-1)
			if ferr == nil {
				if o, ok := committed.Lookup(c.topic, p); ok && o.Err == nil {
					got = o.At
				}
			}
			if got != inputEnd[p] {
				behind = append(behind, fmt.Sprintf("p%d committed %d, end %d", p, got, inputEnd[p]))
			}
		}
		if ferr != nil {
			behind = append(behind, "fetching the offsets: "+ferr.Error())
		}
		if len(behind) == 0 || time.Since(t0) > c.timeout {
			break
		}
		time.Sleep(500 * time.Millisecond) // polling the observed commits, bounded above by c.timeout
	}
	mr.QuietSeconds = time.Since(t0).Seconds()
	mr.OffsetsAtEnd = len(behind) == 0
	if !mr.OffsetsAtEnd {
		mr.OffsetProblems = behind
		mr.Problems = append(mr.Problems, fmt.Sprintf("(5) the group did not commit every partition to the input's end within %v: %s",
			c.timeout, strings.Join(behind, "; ")))
	}
	c.logf("quiet after %.1fs (every partition committed to the input's end: %v)", mr.QuietSeconds, mr.OffsetsAtEnd)

	// The input: each key's exact fold, in offset order.
	want := map[string]state{}
	wantOff := map[string]int64{}
	type io struct {
		p   int32
		off int64
	}
	inputs := map[io]int{}
	seqs := map[int64]bool{}
	var badInput int
	if _, err := c.read(ctx, c.topic, false, inputEnd, nil, func(r *kgo.Record) {
		seq, err := strconv.ParseInt(string(r.Value), 10, 64)
		if err != nil {
			badInput++
			return
		}
		if seqs[seq] {
			mr.InputSeqDuplicates++
		}
		seqs[seq] = true
		k := string(r.Key)
		want[k] = want[k].step(seq)
		wantOff[k] = r.Offset
		inputs[io{r.Partition, r.Offset}] = 0
	}); err != nil {
		return fmt.Errorf("reading the input: %w", err)
	}
	mr.EventsIn = int64(len(inputs))
	if badInput > 0 {
		return fmt.Errorf("%d input records without a sequence number", badInput)
	}

	snaps := kafka.DefaultSnapshotTopic(c.topic, c.topic)
	snapHW, snapLSO, err := c.bounds(ctx, adm, snaps)
	if err != nil {
		return err
	}
	outHW, outLSO, err := c.bounds(ctx, adm, c.output)
	if err != nil {
		return err
	}
	// (4b) Nothing open at the end: every last stable offset at its end.
	for _, t := range []struct {
		name    string
		hw, lso map[int32]int64
	}{{snaps, snapHW, snapLSO}, {c.output, outHW, outLSO}} {
		for _, p := range slices.Sorted(maps.Keys(t.hw)) {
			if t.lso[p] < t.hw[p] {
				mr.OpenAtEnd = append(mr.OpenAtEnd, fmt.Sprintf("%s/%d: last stable offset %d, end %d", t.name, p, t.lso[p], t.hw[p]))
			}
		}
	}

	// (1) and (3): the snapshots, read_committed.
	type snap struct {
		st  state
		off int64
	}
	last := map[string]snap{}
	var undecodable int
	decode := func(r *kgo.Record) (string, snap, bool) {
		if r.Attrs.IsControl() {
			return "", snap{}, false
		}
		sn, kind, err := kafkatest.DecodeRecord(snaps, r)
		if err != nil {
			undecodable++
			return "", snap{}, false
		}
		if kind == wire.KindOffsetMarker {
			return "", snap{}, false
		}
		if sn.Tombstone {
			return string(sn.Key), snap{off: sn.Offset}, true
		}
		st, err := engine.JSON[state]().Decode(sn.Value)
		if err != nil {
			undecodable++
			return "", snap{}, false
		}
		return string(sn.Key), snap{st: st, off: sn.Offset}, true
	}
	incomplete, err := c.read(ctx, snaps, true, snapLSO, snapHW, func(r *kgo.Record) {
		k, s, ok := decode(r)
		if !ok {
			return
		}
		mr.SnapshotsCommitted++
		if prev, seen := last[k]; seen && (s.st.N < prev.st.N || s.off < prev.off) {
			mr.StaleOverwrites++
			if len(mr.StaleExamples) < 5 {
				mr.StaleExamples = append(mr.StaleExamples, fmt.Sprintf("%s: snapshot at %s/%d has count %d (input offset %d) after count %d (input offset %d)",
					k, snaps, r.Offset, s.st.N, s.off, prev.st.N, prev.off))
			}
		}
		last[k] = s
	})
	if err != nil {
		return fmt.Errorf("reading %s read_committed: %w", snaps, err)
	}
	mr.ReadIncomplete = append(mr.ReadIncomplete, incomplete...)
	if undecodable > 0 {
		return fmt.Errorf("%d records of %s do not decode", undecodable, snaps)
	}
	mr.Keys = len(want)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		w, g := want[k], last[k]
		switch {
		case g.st == w && g.off == wantOff[k]:
			continue
		case g.st.N < w.N:
			mr.LostEvents += w.N - g.st.N
		case g.st.N > w.N:
			mr.DoubledEvents += g.st.N - w.N
		}
		mr.KeysWrong++
		if len(mr.WrongExamples) < 5 {
			mr.WrongExamples = append(mr.WrongExamples, fmt.Sprintf("%s: snapshot %+v at input offset %d, exact fold %+v at %d", k, g.st, g.off, w, wantOff[k]))
		}
	}
	for k := range last {
		if _, ok := want[k]; !ok {
			mr.KeysWrong++
			if len(mr.WrongExamples) < 5 {
				mr.WrongExamples = append(mr.WrongExamples, fmt.Sprintf("%s: a snapshot of a key with no input", k))
			}
		}
	}

	// (3, information) read_uncommitted: aborted writes show, and may go
	// back in time; only committed ones count above.
	prevU := map[string]snap{}
	if _, err := c.read(ctx, snaps, false, snapHW, nil, func(r *kgo.Record) {
		k, s, ok := decode(r)
		if !ok {
			return
		}
		mr.SnapshotsWritten++
		if prev, seen := prevU[k]; seen && s.st.N < prev.st.N {
			mr.UncommittedRegressions++
		}
		prevU[k] = s
	}); err != nil {
		return fmt.Errorf("reading %s read_uncommitted: %w", snaps, err)
	}

	// (2) The outputs, read_committed: each input's once (eos), at least
	// once (alo).
	var strange int
	incomplete, err = c.read(ctx, c.output, true, outLSO, outHW, func(r *kgo.Record) {
		if r.Attrs.IsControl() {
			return
		}
		f := strings.Split(string(r.Value), "/")
		if len(f) != 3 {
			strange++
			return
		}
		p, err1 := strconv.ParseInt(f[0], 10, 32)
		off, err2 := strconv.ParseInt(f[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			strange++
			return
		}
		k := io{int32(p), off}
		if _, ok := inputs[k]; !ok {
			strange++
			return
		}
		inputs[k]++
		mr.OutputsRead++
	})
	if err != nil {
		return fmt.Errorf("reading %s read_committed: %w", c.output, err)
	}
	mr.ReadIncomplete = append(mr.ReadIncomplete, incomplete...)
	mr.OutputsForeign = strange
	for _, k := range slices.SortedFunc(maps.Keys(inputs), func(x, y io) int {
		if x.p != y.p {
			return int(x.p - y.p)
		}
		return int(x.off - y.off)
	}) {
		n := inputs[k]
		switch {
		case n == 0:
			mr.OutputsMissing++
			if len(mr.MissingExamples) < 10 {
				mr.MissingExamples = append(mr.MissingExamples, fmt.Sprintf("%d/%d", k.p, k.off))
			}
		case n > 1:
			mr.OutputDuplicates += int64(n - 1)
			mr.InputsDuplicated++
		}
	}

	// (2b) The concurrent read_committed consumer, which read through the
	// faults: it must have seen what the read after them saw, output for
	// output (so, under eos, each input's once).
	if c.tail != nil {
		if err := c.awaitTail(c.tail, outLSO); err != nil {
			mr.Problems = append(mr.Problems, "(2b) "+err.Error())
		} else {
			c.tail.mu.Lock()
			mr.TailChecked = true
			mr.TailForeign = c.tail.strange
			for k, n := range c.tail.seen {
				mr.TailRead += int64(n)
				if _, ok := inputs[io{int32(k[0]), k[1]}]; !ok {
					mr.TailForeign++
				}
			}
			for k, n := range inputs {
				seen := c.tail.seen[[2]int64{int64(k.p), k.off}]
				switch {
				case seen == 0 && n > 0:
					mr.TailMissing++
				case seen > 1:
					mr.TailDuplicates += int64(seen - 1)
					mr.TailInputsDup++
				}
				if seen != n && len(mr.TailDiffers) < 5 {
					mr.TailDiffers = append(mr.TailDiffers, fmt.Sprintf("input %d/%d: %d outputs seen during the run, %d after", k.p, k.off, seen, n))
				}
				if seen != n {
					mr.TailDiffering++
				}
			}
			c.tail.mu.Unlock()
		}
	}

	// (4) find-hanging on every broker.
	bs, err := adm.ListBrokers(ctx)
	if err != nil {
		return err
	}
	for _, id := range bs.NodeIDs() {
		lines, err := findHanging(ctx, strings.Join(c.seeds, ","), id)
		if err != nil {
			mr.Problems = append(mr.Problems, fmt.Sprintf("(4) find-hanging on broker %d: %v", id, err))
			continue
		}
		mr.HangingChecked = append(mr.HangingChecked, id)
		mr.Hanging = append(mr.Hanging, lines...)
	}
	return nil
}

// bounds returns each partition's high watermark and last stable offset.
func (c *chaos) bounds(ctx context.Context, adm *kadm.Client, topic string) (hw, lso map[int32]int64, err error) {
	hw, lso = map[int32]int64{}, map[int32]int64{}
	e, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = e.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the end offsets: %w", topic, err)
	}
	e.Each(func(o kadm.ListedOffset) { hw[o.Partition] = o.Offset })
	l, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the last stable offsets: %w", topic, err)
	}
	l.Each(func(o kadm.ListedOffset) { lso[o.Partition] = o.Offset })
	return hw, lso, nil
}

// read reads every partition of topic from its start to ends (exclusive),
// read_committed or not, handing each record below its end to fn. A
// read_committed read can stop short of an end that an open transaction's
// aborted neighbours hide (pinned: the partitions whose ends are below
// their hw): those are returned as incomplete once no record came for a
// while, rather than waited for.
func (c *chaos) read(ctx context.Context, topic string, committed bool, ends, hw map[int32]int64, fn func(*kgo.Record)) ([]string, error) {
	at := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for p, e := range ends {
		if e > 0 {
			at[p] = kgo.NewOffset().AtStart()
			left[p] = e
		}
	}
	if len(left) == 0 {
		return nil, nil
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}), kgo.KeepControlRecords()}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	deadline := time.Now().Add(c.timeout)
	for len(left) > 0 {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not read to the end within %v (partition: end left %v)", c.timeout, left)
		}
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.IsClientClosed() {
			return nil, errors.New("client closed")
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			e, ok := left[r.Partition]
			if r.Offset >= ends[r.Partition] {
				return
			}
			n++
			if ok && r.Offset+1 >= e {
				delete(left, r.Partition)
			}
			fn(r)
		})
		if n == 0 && hw != nil {
			// Nothing for 20 s: only partitions pinned by an open
			// transaction may be left.
			var pinned []string
			for p, e := range left {
				if e >= hw[p] {
					pinned = nil
					break
				}
				pinned = append(pinned, fmt.Sprintf("%s/%d (last stable offset %d, end %d)", topic, p, e, hw[p]))
			}
			if len(pinned) > 0 {
				slices.Sort(pinned)
				return pinned, nil
			}
		}
	}
	return nil, nil
}

// findHanging runs `kafka-transactions find-hanging` for one broker and
// returns the transactions it lists. The maximum transaction timeout is
// the members' (one minute), not the tool's default fifteen.
func findHanging(ctx context.Context, bootstrap string, broker int32) ([]string, error) {
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := kafkatest.RunTool(tctx, "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap,
		"find-hanging", "--broker-id", strconv.Itoa(int(broker)), "--max-transaction-timeout", "1")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "Topic") {
		return nil, fmt.Errorf("unexpected output:\n%s", out)
	}
	var hanging []string
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) != "" {
			hanging = append(hanging, fmt.Sprintf("broker %d: %s", broker, strings.Join(strings.Fields(l), " ")))
		}
	}
	return hanging, nil
}
