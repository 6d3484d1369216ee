package operator

import (
	"context"
	"errors"
	"fmt"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// ErrPlainMode: the verb needs transactions, and a Plain application has
// none.
var ErrPlainMode = errors.New("the application runs in Plain mode, which has no transactions")

// HangingReport lists the hanging transactions on the application's
// snapshot partitions and its group's offsets partition, and what an
// abort did.
type HangingReport struct {
	Hanging []Txn `json:"hanging"`
	// Aborted are those the run aborted (with abort asked).
	Aborted []Txn `json:"aborted,omitempty"`
	// Refused says, per input partition, why its hanging transactions
	// were not aborted.
	Refused []string `json:"refused,omitempty"`
}

// Hanging lists the application's hanging transactions and, with abort,
// aborts those of each input partition when every one is proven of the
// partition's own transactional.id (kafka.Backend's proof, as
// kafka.Config.AbortHangingTransactions uses); a partition with one not
// so proven is left alone and named in Refused. While the group has no
// member the proof includes a takeover of the partition's
// transactional.id, as an acquisition's does.
func (tool *Tool) Hanging(ctx context.Context, abort bool) (*HangingReport, error) {
	if tool.store == nil {
		return nil, ErrPlainMode
	}
	n, err := tool.partitions(ctx, tool.t.Input)
	if err != nil {
		return nil, err
	}
	rep := &HangingReport{Hanging: []Txn{}}
	// A takeover of a partition's transactional.id proves what the
	// coordinator forgot, but fences its owner: only with no member.
	var takeover bool
	if abort {
		g, err := tool.describeGroup(ctx)
		if err != nil {
			return nil, err
		}
		takeover = g.members == 0
	}
	for p := range n {
		input := store.TopicPartition{Topic: tool.t.Input, Partition: p}
		ts, err := tool.store.Transactions(ctx, input, tool.t.Group)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", input, err)
		}
		var hanging int
		for _, t := range ts {
			if t.Hanging && !seen(rep.Hanging, t) {
				rep.Hanging = append(rep.Hanging, txnOf(t, tool.bootstrap))
				hanging++
			}
		}
		if !abort || hanging == 0 {
			continue
		}
		aborted, err := tool.store.AbortHangingTransactions(ctx, input, tool.t.Group, takeover)
		if errors.Is(err, kafka.ErrNotOwnLineage) {
			why := fmt.Sprintf("input %s: %v", input, err)
			if !takeover {
				why += "; the group has members, so the tool did not take the transactional.id over to prove it (stop the application and run again)"
			}
			rep.Refused = append(rep.Refused, why)
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("input %s: aborting: %w", input, err)
		}
		for _, h := range aborted {
			rep.Aborted = append(rep.Aborted, txnOf(kafka.Transaction{HangingTransaction: h, Hanging: true, Own: true}, tool.bootstrap))
		}
	}
	return rep, nil
}

// seen: the group's offsets partition is shared by every input
// partition, so a transaction on it is listed once.
func seen(ts []Txn, t kafka.Transaction) bool {
	for _, x := range ts {
		if x.Partition == t.Partition.String() && x.ProducerID == t.ProducerID && x.StartOffset == t.StartOffset {
			return true
		}
	}
	return false
}
