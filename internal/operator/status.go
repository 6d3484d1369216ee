package operator

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
	"github.com/snapfence/snapfence/store/wire"
)

// Status is the application's state on the cluster, per input partition.
type Status struct {
	Application   string `json:"application"`
	Group         string `json:"group"`
	GroupState    string `json:"group_state"`
	Input         string `json:"input"`
	SnapshotTopic string `json:"snapshot_topic"`
	// Members is how many members the group has.
	Members int `json:"members"`
	// SnapshotTopicMissing: the snapshot topic does not exist (the
	// application never ran, or it names its topic otherwise).
	SnapshotTopicMissing bool              `json:"snapshot_topic_missing,omitempty"`
	Partitions           []PartitionStatus `json:"partitions"`
}

// PartitionStatus is one input partition.
type PartitionStatus struct {
	Partition int32 `json:"partition"`
	// Member is the member the group assigned it to ("" for none), and
	// Host that member's client host.
	Member string `json:"member,omitempty"`
	Host   string `json:"host,omitempty"`
	// Committed is the group's committed offset (-1 for none), and
	// CommittedBy the application its metadata names ("" when it is not
	// snapfence's).
	Committed   int64  `json:"committed"`
	CommittedBy string `json:"committed_by,omitempty"`
	// End is the input partition's high watermark; Lag is End minus
	// Committed (or minus the log start with no commit).
	End int64 `json:"end"`
	Lag int64 `json:"lag"`
	// SnapshotHighWatermark and SnapshotLastStable are the snapshot
	// partition's high watermark and last stable offset; they differ
	// while a transaction is open on it.
	SnapshotHighWatermark int64 `json:"snapshot_high_watermark"`
	SnapshotLastStable    int64 `json:"snapshot_last_stable"`
	// Transactions are those open on the snapshot partition or the
	// group's offsets partition.
	Transactions []Txn `json:"transactions,omitempty"`
	// Err is what could not be read for the partition.
	Err string `json:"error,omitempty"`
}

// Txn is an open transaction.
type Txn struct {
	Partition       string `json:"partition"`
	ProducerID      int64  `json:"producer_id"`
	ProducerEpoch   int16  `json:"producer_epoch"`
	StartOffset     int64  `json:"start_offset"`
	TransactionalID string `json:"transactional_id,omitempty"`
	// Hanging: no coordinator has it ongoing; only an abort ends it.
	Hanging bool `json:"hanging"`
	// Own: the application's (for a hanging one, proven of the
	// partition's own transactional.id).
	Own bool `json:"own"`
	// AbortCommand is kafka-transactions.sh's command that aborts it.
	AbortCommand string `json:"abort_command,omitempty"`
}

func txnOf(t kafka.Transaction, bootstrap string) Txn {
	x := Txn{Partition: t.Partition.String(), ProducerID: t.ProducerID, ProducerEpoch: t.ProducerEpoch,
		StartOffset: t.StartOffset, TransactionalID: t.TransactionalID, Hanging: t.Hanging, Own: t.Own}
	if t.Hanging {
		x.AbortCommand = t.AbortCommand(bootstrap)
	}
	return x
}

// Status reads the application's status.
func (tool *Tool) Status(ctx context.Context) (*Status, error) {
	t := tool.t
	n, err := tool.partitions(ctx, t.Input)
	if err != nil {
		return nil, err
	}
	st := &Status{Application: t.Application, Group: t.Group, Input: t.Input, SnapshotTopic: t.SnapshotTopic}
	g, err := tool.describeGroup(ctx)
	if err != nil {
		return nil, err
	}
	st.GroupState, st.Members = g.state, g.members
	committed, err := tool.committed(ctx)
	if err != nil {
		return nil, err
	}
	ends, err := tool.adm.ListEndOffsets(ctx, t.Input)
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %q: %w", t.Input, err)
	}
	starts, err := tool.adm.ListStartOffsets(ctx, t.Input)
	if err != nil {
		return nil, fmt.Errorf("listing the start offsets of %q: %w", t.Input, err)
	}
	var snapHW, snapLSO kadm.ListedOffsets
	_, snapErr := tool.partitions(ctx, t.SnapshotTopic)
	if errors.Is(snapErr, ErrTopicMissing) {
		st.SnapshotTopicMissing = true
	} else if snapErr == nil {
		snapHW, snapErr = tool.adm.ListEndOffsets(ctx, t.SnapshotTopic)
		snapLSO, _ = tool.adm.ListCommittedOffsets(ctx, t.SnapshotTopic)
	}
	for p := range n {
		ps := PartitionStatus{Partition: p, Committed: -1, SnapshotHighWatermark: -1, SnapshotLastStable: -1}
		if m, ok := g.owners[p]; ok {
			ps.Member, ps.Host = m.ID, m.Host
		}
		if c, ok := committed[p]; ok {
			ps.Committed = c.At
			ps.CommittedBy, _ = wire.CommitApplication(c.Metadata)
		}
		var errs []error
		if e, ok := ends.Lookup(t.Input, p); ok && e.Err == nil {
			ps.End = e.Offset
			from := ps.Committed
			if s, ok := starts.Lookup(t.Input, p); from < 0 && ok && s.Err == nil {
				from = s.Offset
			}
			ps.Lag = max(0, ps.End-from)
		} else {
			errs = append(errs, fmt.Errorf("end offset: %v", e.Err))
		}
		switch {
		case st.SnapshotTopicMissing:
		case snapErr != nil:
			errs = append(errs, fmt.Errorf("snapshot topic %q: %w", t.SnapshotTopic, snapErr))
		default:
			if o, ok := snapHW.Lookup(t.SnapshotTopic, p); ok && o.Err == nil {
				ps.SnapshotHighWatermark = o.Offset
			} else {
				errs = append(errs, fmt.Errorf("snapshot partition %s/%d: %v", t.SnapshotTopic, p, missing(o.Err)))
			}
			if o, ok := snapLSO.Lookup(t.SnapshotTopic, p); ok && o.Err == nil {
				ps.SnapshotLastStable = o.Offset
			}
		}
		if tool.store != nil && snapErr == nil && !st.SnapshotTopicMissing {
			input := store.TopicPartition{Topic: t.Input, Partition: p}
			ts, err := tool.store.Transactions(ctx, input, t.Group)
			if err != nil {
				errs = append(errs, fmt.Errorf("open transactions: %w", err))
			}
			for _, x := range ts {
				// The group's offsets partition is every input
				// partition's: each row shows its own transactional.id's
				// there (and those of no known id).
				if x.Partition.Topic != t.SnapshotTopic && x.TransactionalID != "" && x.TransactionalID != tool.store.TransactionalID(input) {
					continue
				}
				ps.Transactions = append(ps.Transactions, txnOf(x, tool.bootstrap))
			}
		}
		if err := errors.Join(errs...); err != nil {
			ps.Err = err.Error()
		}
		st.Partitions = append(st.Partitions, ps)
	}
	return st, nil
}

func missing(err error) error {
	if err == nil {
		return errors.New("missing")
	}
	return err
}

type group struct {
	state   string
	members int
	owners  map[int32]Member
}

// describeGroup reads the group's state and who is assigned each input
// partition (tool.members: under either protocol).
func (tool *Tool) describeGroup(ctx context.Context) (group, error) {
	state, ms, err := tool.members(ctx)
	if err != nil {
		return group{}, err
	}
	g := group{state: state, members: len(ms), owners: map[int32]Member{}}
	for _, m := range ms {
		for _, p := range m.Partitions {
			g.owners[p] = m
		}
	}
	return g, nil
}

// committed returns the group's committed offsets of the input.
func (tool *Tool) committed(ctx context.Context) (map[int32]kadm.Offset, error) {
	out := map[int32]kadm.Offset{}
	os, err := tool.adm.FetchOffsetsForTopics(ctx, tool.t.Group, tool.t.Input)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil // a group that never committed
	}
	if err != nil {
		return nil, fmt.Errorf("fetching the offsets group %q committed: %w", tool.t.Group, err)
	}
	var errs []error
	os.Each(func(r kadm.OffsetResponse) {
		switch {
		case r.Topic != tool.t.Input:
		case r.Err != nil:
			errs = append(errs, fmt.Errorf("the offset group %q committed for %s/%d: %w", tool.t.Group, r.Topic, r.Partition, r.Err))
		case r.At >= 0:
			out[r.Partition] = r.Offset
		}
	})
	return out, errors.Join(errs...)
}
