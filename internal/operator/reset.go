package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Reset rewinds an application's input offsets and deletes its state
// together, while none of its members runs, so that the engine refolds
// the input from the new offsets with empty state. The state cannot be
// rewound to a past point in general (the snapshot topic is compacted
// and keeps only each key's last snapshot), so a reset always deletes
// all of it: after a reset to a datetime T the state is the fold of the
// input from T on, not of the whole input.

// ResetOptions says where a reset rewinds the input to: exactly one of
// ToEarliest and ToDatetime.
type ResetOptions struct {
	// ToEarliest rewinds every input partition to its log start.
	ToEarliest bool
	// ToDatetime rewinds every input partition to its first record at or
	// after it (its end, when it has none).
	ToDatetime time.Time
	// DropState confirms a reset to a datetime: it deletes the whole
	// state too, and the state after it is the fold of the input from
	// ToDatetime on. ApplyReset refuses a datetime reset without it.
	DropState bool
}

// ResetPlan is what a reset does, computed before anything changes.
type ResetPlan struct {
	Application   string `json:"application"`
	Group         string `json:"group"`
	Input         string `json:"input"`
	SnapshotTopic string `json:"snapshot_topic"`
	// To is "earliest" or "datetime"; Datetime is set with "datetime".
	To        string     `json:"to"`
	Datetime  *time.Time `json:"datetime,omitempty"`
	DropState bool       `json:"drop_state"`
	// GroupState is the group's state when planned (no members).
	GroupState string `json:"group_state"`
	// Metadata is what each offset is committed with.
	Metadata string `json:"metadata"`
	// Input and Snapshots are the partitions' moves.
	Inputs    []ResetInput    `json:"input_partitions"`
	Snapshots []ResetSnapshot `json:"snapshot_partitions"`
	// SnapshotTopicMissing: there is no snapshot topic, so no state to
	// delete.
	SnapshotTopicMissing bool `json:"snapshot_topic_missing,omitempty"`
	// SnapshotConfigs are the snapshot topic's own settings that the
	// deletion changes for its duration and then restores (nil: not
	// set on the topic).
	SnapshotConfigs map[string]*string `json:"snapshot_configs,omitempty"`
	// StateAfter says what the state is once the engine has refolded.
	StateAfter string `json:"state_after"`
	// Steps are what ApplyReset does, in order.
	Steps []string `json:"steps"`
	// Executed: ApplyReset carried the plan out.
	Executed bool `json:"executed"`
}

// ResetInput is an input partition's move.
type ResetInput struct {
	Partition int32 `json:"partition"`
	// Committed is the group's committed offset (-1 for none), and
	// CommittedBy the application its metadata names.
	Committed   int64  `json:"committed"`
	CommittedBy string `json:"committed_by,omitempty"`
	// Start and End are the partition's log start and high watermark.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// To is the offset committed; Refold the records from it to End.
	To     int64 `json:"to"`
	Refold int64 `json:"refold"`
}

// ResetSnapshot is a snapshot partition's deletion: its records from
// Start to End (the high watermark when planned) are deleted.
type ResetSnapshot struct {
	Partition int32 `json:"partition"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
	Records   int64 `json:"records"`
}

// LiveMembersError: the group has members, and the verb changes what
// they would be using.
type LiveMembersError struct {
	Group   string
	State   string
	Members []Member
}

// Member is a member of the group.
type Member struct {
	ID string `json:"id"`
	// InstanceID is a static member's instance id: it stays in the group
	// after it stops, until its session times out.
	InstanceID string  `json:"instance_id,omitempty"`
	ClientID   string  `json:"client_id,omitempty"`
	Host       string  `json:"host,omitempty"`
	Partitions []int32 `json:"partitions,omitempty"`
}

func (e *LiveMembersError) Error() string {
	var ms []string
	static := false
	for _, m := range e.Members {
		s := m.ID
		if m.InstanceID != "" {
			s += " (instance " + m.InstanceID + ")"
			static = true
		}
		if m.Host != "" {
			s += " on " + m.Host
		}
		if len(m.Partitions) > 0 {
			s += fmt.Sprintf(" (input partitions %v)", m.Partitions)
		}
		ms = append(ms, s)
	}
	msg := fmt.Sprintf("group %q (%s) has %d live members: %s; stop every member of the application first",
		e.Group, e.State, len(e.Members), strings.Join(ms, ", "))
	if static {
		msg += " (a static member, one with an instance id, stays in the group after it stops until its session times out)"
	}
	return msg
}

// OpenTransactionsError: a transaction is open where the verb would
// change things under it (records of an open transaction cannot be
// deleted safely, and one on the offsets partition may still commit an
// offset).
type OpenTransactionsError struct {
	Txns []Txn
}

func (e *OpenTransactionsError) Error() string {
	var ts []string
	for _, t := range e.Txns {
		s := fmt.Sprintf("%s: producer %d epoch %d from offset %d", t.Partition, t.ProducerID, t.ProducerEpoch, t.StartOffset)
		switch {
		case t.Hanging:
			s += " (hanging; abort it with: " + t.AbortCommand + ")"
		case t.TransactionalID != "":
			s += fmt.Sprintf(" (ongoing, transactional.id %q)", t.TransactionalID)
		default:
			s += " (open)"
		}
		ts = append(ts, s)
	}
	return "transactions are open: " + strings.Join(ts, "; ") + "; wait for them to end (or abort a hanging one), then plan again"
}

// ForeignRecordsError: the snapshot topic holds a record that is not
// the application's, so deleting its records could delete another
// application's state.
type ForeignRecordsError struct {
	Topic     string
	Partition int32
	Offset    int64
	// Application is the application the record names; empty for a
	// record that is no snapfence snapshot record at all.
	Application string
	Err         string
}

func (e *ForeignRecordsError) Error() string {
	if e.Application != "" {
		return fmt.Sprintf("%s/%d offset %d is a record of application %q: the topic is not only this application's; nothing is deleted",
			e.Topic, e.Partition, e.Offset, e.Application)
	}
	return fmt.Sprintf("%s/%d offset %d is not a snapfence snapshot record (%s): the topic is not only this application's; nothing is deleted",
		e.Topic, e.Partition, e.Offset, e.Err)
}

// ErrPlanStale: the cluster changed since the plan was computed.
var ErrPlanStale = errors.New("the cluster changed since the plan; plan again")

// ErrDropStateNotConfirmed: a reset to a datetime without DropState.
var ErrDropStateNotConfirmed = errors.New("a reset to a datetime deletes the whole state: the state after it is the fold of the input from that datetime on, not of the whole input; confirm with DropState (-drop-state)")

// members lists the group's members (under either protocol).
func (tool *Tool) members(ctx context.Context) (string, []Member, error) {
	cgs, err := tool.adm.DescribeConsumerGroups(ctx, tool.t.Group)
	if err == nil {
		if d, ok := cgs[tool.t.Group]; ok && d.Err == nil && d.State != "Dead" && d.State != "" {
			var ms []Member
			for _, m := range d.Members {
				var ps []int32
				for p := range m.Assignment[tool.t.Input] {
					ps = append(ps, p)
				}
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				ms = append(ms, Member{ID: m.MemberID, InstanceID: deref(m.InstanceID), ClientID: m.ClientID, Host: m.ClientHost, Partitions: ps})
			}
			return d.State, ms, nil
		}
	}
	ds, err := tool.adm.DescribeGroups(ctx, tool.t.Group)
	if err != nil {
		return "", nil, fmt.Errorf("describing group %q: %w", tool.t.Group, err)
	}
	d, ok := ds[tool.t.Group]
	if !ok {
		return "Dead", nil, nil
	}
	if errors.Is(d.Err, kerr.GroupIDNotFound) {
		return "Dead", nil, nil
	}
	if d.Err != nil {
		return "", nil, fmt.Errorf("describing group %q: %w", tool.t.Group, d.Err)
	}
	var ms []Member
	for _, m := range d.Members {
		mm := Member{ID: m.MemberID, InstanceID: deref(m.InstanceID), ClientID: m.ClientID, Host: m.ClientHost}
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range ca.Topics {
				if tp.Topic == tool.t.Input {
					mm.Partitions = append(mm.Partitions, tp.Partitions...)
				}
			}
		}
		sort.Slice(mm.Partitions, func(i, j int) bool { return mm.Partitions[i] < mm.Partitions[j] })
		ms = append(ms, mm)
	}
	return d.State, ms, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// noMembers returns the group's state, or a *LiveMembersError if it has
// any member: an idle member may be assigned partitions at any moment.
func (tool *Tool) noMembers(ctx context.Context) (string, error) {
	state, ms, err := tool.members(ctx)
	if err != nil {
		return "", err
	}
	if len(ms) > 0 {
		return state, &LiveMembersError{Group: tool.t.Group, State: state, Members: ms}
	}
	return state, nil
}

// openTransactions returns a *OpenTransactionsError naming the
// transactions open on the snapshot partitions of the input partitions
// given or on the group's offsets partition; in Plain mode, which cannot
// name them, those seen on the snapshot partitions (last stable offset
// below the high watermark).
func (tool *Tool) openTransactions(ctx context.Context, inputs []int32) error {
	var txns []Txn
	if tool.store != nil {
		for _, p := range inputs {
			ts, err := tool.store.Transactions(ctx, store.TopicPartition{Topic: tool.t.Input, Partition: p}, tool.t.Group)
			if err != nil {
				return fmt.Errorf("listing open transactions of input partition %d: %w", p, err)
			}
			for _, x := range ts {
				if t := txnOf(x, tool.bootstrap); !hasTxn(txns, t) {
					txns = append(txns, t)
				}
			}
		}
	}
	// Whatever Transactions saw, a last stable offset below the high
	// watermark is an open transaction on a snapshot partition too (of a
	// partition beyond the input's count, say).
	hw, err := tool.adm.ListEndOffsets(ctx, tool.t.SnapshotTopic)
	if err == nil {
		lso, err := tool.adm.ListCommittedOffsets(ctx, tool.t.SnapshotTopic)
		if err != nil {
			return fmt.Errorf("listing the last stable offsets of %q: %w", tool.t.SnapshotTopic, err)
		}
		hw.Each(func(o kadm.ListedOffset) {
			l, ok := lso.Lookup(o.Topic, o.Partition)
			if o.Err != nil || !ok || l.Err != nil || l.Offset >= o.Offset {
				return
			}
			name := fmt.Sprintf("%s/%d", o.Topic, o.Partition)
			for _, t := range txns {
				if t.Partition == name {
					return
				}
			}
			txns = append(txns, Txn{Partition: name, ProducerID: -1, ProducerEpoch: -1, StartOffset: l.Offset})
		})
	}
	if len(txns) > 0 {
		return &OpenTransactionsError{Txns: txns}
	}
	return nil
}

func hasTxn(ts []Txn, t Txn) bool {
	for _, x := range ts {
		if x.Partition == t.Partition && x.ProducerID == t.ProducerID && x.StartOffset == t.StartOffset {
			return true
		}
	}
	return false
}

// PlanReset computes a reset: it refuses while the group has members,
// while a transaction is open on the snapshot topic or the group's
// offsets, and when the snapshot topic holds a record that is not the
// application's. Nothing changes.
func (tool *Tool) PlanReset(ctx context.Context, o ResetOptions) (*ResetPlan, error) {
	t := tool.t
	if o.ToEarliest == !o.ToDatetime.IsZero() {
		return nil, errors.New("give exactly one of -to-earliest and -to-datetime")
	}
	state, err := tool.noMembers(ctx)
	if err != nil {
		return nil, err
	}
	n, err := tool.partitions(ctx, t.Input)
	if err != nil {
		return nil, err
	}
	p := &ResetPlan{Application: t.Application, Group: t.Group, Input: t.Input, SnapshotTopic: t.SnapshotTopic,
		GroupState: state, Metadata: wire.CommitMetadata(t.Application), DropState: o.DropState}
	committed, err := tool.committedOffsets(ctx)
	if err != nil {
		return nil, err
	}
	starts, err := tool.adm.ListStartOffsets(ctx, t.Input)
	if err != nil {
		return nil, fmt.Errorf("listing the start offsets of %q: %w", t.Input, err)
	}
	ends, err := tool.adm.ListEndOffsets(ctx, t.Input)
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %q: %w", t.Input, err)
	}
	to := starts
	p.To = "earliest"
	if !o.ToEarliest {
		p.To = "datetime"
		d := o.ToDatetime.UTC()
		p.Datetime = &d
		if to, err = tool.adm.ListOffsetsAfterMilli(ctx, d.UnixMilli(), t.Input); err != nil {
			return nil, fmt.Errorf("listing the offsets of %q at %s: %w", t.Input, d.Format(time.RFC3339), err)
		}
	}
	var inputs []int32
	for i := range n {
		in := ResetInput{Partition: i, Committed: -1}
		if c, ok := committed[i]; ok {
			in.Committed = c.At
			in.CommittedBy, _ = wire.CommitApplication(c.Metadata)
		}
		s, ok1 := starts.Lookup(t.Input, i)
		e, ok2 := ends.Lookup(t.Input, i)
		x, ok3 := to.Lookup(t.Input, i)
		if !ok1 || !ok2 || !ok3 || s.Err != nil || e.Err != nil || x.Err != nil {
			return nil, fmt.Errorf("listing the offsets of input partition %d: %v", i, errors.Join(s.Err, e.Err, x.Err))
		}
		in.Start, in.End, in.To = s.Offset, e.Offset, x.Offset
		in.Refold = in.End - in.To
		p.Inputs = append(p.Inputs, in)
		inputs = append(inputs, i)
	}
	if err := tool.openTransactions(ctx, inputs); err != nil {
		return nil, err
	}
	p.Snapshots, err = tool.planSnapshots(ctx)
	switch {
	case errors.Is(err, ErrTopicMissing):
		p.SnapshotTopicMissing = true
	case err != nil:
		return nil, err
	default:
		if p.SnapshotConfigs, err = tool.topicConfigs(ctx); err != nil {
			return nil, err
		}
	}
	p.describe()
	return p, nil
}

// planSnapshots lists every snapshot partition's records and checks
// that each is the application's (a record that names no application
// predates named applications and is read as anyone's, as the store
// reads it).
func (tool *Tool) planSnapshots(ctx context.Context) ([]ResetSnapshot, error) {
	topic := tool.t.SnapshotTopic
	n, err := tool.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	starts, err := tool.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing the start offsets of %q: %w", topic, err)
	}
	ends, err := tool.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %q: %w", topic, err)
	}
	var out []ResetSnapshot
	for i := range n {
		s, ok1 := starts.Lookup(topic, i)
		e, ok2 := ends.Lookup(topic, i)
		if !ok1 || !ok2 || s.Err != nil || e.Err != nil {
			return nil, fmt.Errorf("listing the offsets of %s/%d: %v", topic, i, errors.Join(s.Err, e.Err))
		}
		out = append(out, ResetSnapshot{Partition: i, Start: s.Offset, End: e.Offset, Records: e.Offset - s.Offset})
		// Read uncommitted: an aborted record is no one's state, but one
		// of another application's says the topic is shared.
		tp := store.TopicPartition{Topic: topic, Partition: i}
		err := tool.readPartition(ctx, tp, false, func(r record) error {
			if app, ok := wire.RecordApplication(r.r); ok && string(app) != tool.t.Application {
				return &ForeignRecordsError{Topic: topic, Partition: i, Offset: r.offset, Application: string(app)}
			}
			if _, _, err := wire.DecodeRecord(tp, r.offset, r.r); err != nil {
				return &ForeignRecordsError{Topic: topic, Partition: i, Offset: r.offset, Err: err.Error()}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// describe fills in the plan's steps and what the state is after it.
func (p *ResetPlan) describe() {
	p.Steps = nil
	from := "its log start"
	p.StateAfter = "empty until the engine runs; then each key's state is the fold of the whole input (as far as retention kept it)"
	if p.To == "datetime" {
		from = "its first record at or after " + p.Datetime.Format(time.RFC3339) + " (its end if none)"
		p.StateAfter = "empty until the engine runs; then each key's state is the fold of the input from " +
			p.Datetime.Format(time.RFC3339) + " on only, NOT of the whole input: every state is deleted and events before that are not folded again"
	}
	p.Steps = append(p.Steps, fmt.Sprintf("check that group %q still has no members, no transaction is open and nothing moved since this plan", p.Group))
	for _, in := range p.Inputs {
		p.Steps = append(p.Steps, fmt.Sprintf("commit offset %d of input %s/%d for group %q (%s; committed now: %s), with metadata %q",
			in.To, p.Input, in.Partition, p.Group, from, offsetText(in.Committed), p.Metadata))
	}
	if p.SnapshotTopicMissing {
		p.Steps = append(p.Steps, fmt.Sprintf("snapshot topic %q does not exist: no state to delete", p.SnapshotTopic))
	}
	deleting := len(p.Snapshots) > 0
	if deleting {
		var set []string
		for _, d := range deletableConfigs {
			set = append(set, d.key+"="+d.value)
		}
		p.Steps = append(p.Steps, fmt.Sprintf("make snapshot topic %q deletable for the moment (%s: Kafka deletes records only under the delete policy, and with retention off nothing else is lost meanwhile)",
			p.SnapshotTopic, strings.Join(set, ", ")))
	}
	for _, s := range p.Snapshots {
		p.Steps = append(p.Steps, fmt.Sprintf("delete the records of snapshot partition %s/%d below %d (the %d records from %d: every state of its keys)",
			p.SnapshotTopic, s.Partition, s.End, s.Records, s.Start))
	}
	if deleting {
		p.Steps = append(p.Steps, fmt.Sprintf("restore the configuration of %q as found: %s", p.SnapshotTopic, configText(p.SnapshotConfigs)))
	}
	p.Steps = append(p.Steps, "the engine's next run refolds each input partition from the offset committed with empty state; a warm cache (engine Config.Dir) is not used, as the snapshot partitions' log start has moved up to or past any checkpoint it holds")
}

func offsetText(o int64) string {
	if o < 0 {
		return "none"
	}
	return fmt.Sprint(o)
}

// WriteText renders the plan for people.
func (p *ResetPlan) WriteText(w io.Writer) {
	what := "reset to earliest"
	if p.Datetime != nil {
		what = "reset to " + p.Datetime.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%s: application %s, group %s (%s), input %s, snapshots %s\n", what, p.Application, p.Group, p.GroupState, p.Input, p.SnapshotTopic)
	fmt.Fprintf(w, "state after: %s\n", p.StateAfter)
	if p.Datetime != nil && !p.DropState {
		fmt.Fprintln(w, "NOT CONFIRMED: a reset to a datetime deletes the whole state; run it with -drop-state")
	}
	fmt.Fprintln(w, "\nINPUT PARTITION\tCOMMITTED\tSTART\tEND\tTO\tREFOLD")
	for _, in := range p.Inputs {
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%d\t%d\n", in.Partition, offsetText(in.Committed), in.Start, in.End, in.To, in.Refold)
	}
	if len(p.Snapshots) > 0 {
		fmt.Fprintln(w, "\nSNAPSHOT PARTITION\tSTART\tEND\tDELETED")
		for _, s := range p.Snapshots {
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\n", s.Partition, s.Start, s.End, s.Records)
		}
	}
	writeSteps(w, p.Steps, p.Executed)
}

// writeSteps writes a plan's steps, and whether they were carried out.
func writeSteps(w io.Writer, steps []string, executed bool) {
	fmt.Fprintln(w, "\nsteps:")
	for i, s := range steps {
		fmt.Fprintf(w, "%d. %s\n", i+1, s)
	}
	if executed {
		fmt.Fprintln(w, "\ndone.")
	} else {
		fmt.Fprintln(w, "\ndry run: nothing changed (run with -dry-run=false to carry it out)")
	}
}

func (p *ResetPlan) String() string {
	var b strings.Builder
	p.WriteText(&b)
	return b.String()
}

// ApplyReset carries out p: it checks again that the group has no
// members, that no transaction is open and that neither the committed
// offsets nor the snapshot topic moved since p was planned; then it
// commits the input offsets, and then deletes the snapshot records. The
// offsets go first: a reset stopped between the two leaves the old
// states with the input rewound, which replays without double counting
// (each key skips the records at or below its snapshot's offset), and
// applying the plan again finishes it; the other order would leave the
// state empty over offsets that do not refold it.
func (tool *Tool) ApplyReset(ctx context.Context, p *ResetPlan) error {
	t := tool.t
	if p.Application != t.Application || p.Group != t.Group || p.Input != t.Input || p.SnapshotTopic != t.SnapshotTopic {
		return fmt.Errorf("the plan is for application %q, group %q, input %q, not this tool's", p.Application, p.Group, p.Input)
	}
	if p.Datetime != nil && !p.DropState {
		return ErrDropStateNotConfirmed
	}
	if _, err := tool.noMembers(ctx); err != nil {
		return err
	}
	var inputs []int32
	for _, in := range p.Inputs {
		inputs = append(inputs, in.Partition)
	}
	if err := tool.openTransactions(ctx, inputs); err != nil {
		return err
	}
	if err := tool.unmoved(ctx, p); err != nil {
		return err
	}
	os := kadm.Offsets{}
	for _, in := range p.Inputs {
		os.Add(kadm.Offset{Topic: t.Input, Partition: in.Partition, At: in.To, LeaderEpoch: -1, Metadata: p.Metadata})
	}
	if err := tool.commit(ctx, os); err != nil {
		return err
	}
	if len(p.Snapshots) > 0 {
		if err := tool.deleteSnapshots(ctx, p); err != nil {
			return fmt.Errorf("deleting the records of %q (the input offsets are rewound already; plan and apply again): %w", t.SnapshotTopic, err)
		}
	}
	p.Executed = true
	return nil
}

// unmoved refuses p if the group committed offsets or a snapshot
// partition grew since p was planned: a member ran in between, and the
// plan's deletion would not cover what it wrote.
func (tool *Tool) unmoved(ctx context.Context, p *ResetPlan) error {
	committed, err := tool.committedOffsets(ctx)
	if err != nil {
		return err
	}
	for _, in := range p.Inputs {
		now := int64(-1)
		if c, ok := committed[in.Partition]; ok {
			now = c.At
		}
		// A committed offset already at the plan's is a plan applied
		// before, which stopped short of the deletion.
		if now != in.Committed && now != in.To {
			return fmt.Errorf("%w: input partition %d is committed at %s, planned at %s", ErrPlanStale, in.Partition, offsetText(now), offsetText(in.Committed))
		}
	}
	if p.SnapshotTopicMissing {
		return nil
	}
	ends, err := tool.adm.ListEndOffsets(ctx, p.SnapshotTopic)
	if err != nil {
		return fmt.Errorf("listing the end offsets of %q: %w", p.SnapshotTopic, err)
	}
	for _, s := range p.Snapshots {
		e, ok := ends.Lookup(p.SnapshotTopic, s.Partition)
		if !ok || e.Err != nil {
			return fmt.Errorf("listing the end of %s/%d: %v", p.SnapshotTopic, s.Partition, missing(e.Err))
		}
		if e.Offset != s.End {
			return fmt.Errorf("%w: snapshot partition %s/%d ends at %d, planned at %d", ErrPlanStale, p.SnapshotTopic, s.Partition, e.Offset, s.End)
		}
	}
	return nil
}

// commit commits os for the group, as a group without members takes it
// (generation -1: a group that has members since refuses it).
func (tool *Tool) commit(ctx context.Context, os kadm.Offsets) error {
	rs, err := tool.adm.CommitOffsets(ctx, tool.t.Group, os)
	if err != nil {
		return fmt.Errorf("committing the offsets of group %q: %w", tool.t.Group, err)
	}
	if err := rs.Error(); err != nil {
		return fmt.Errorf("committing the offsets of group %q: %w", tool.t.Group, err)
	}
	return nil
}

// deletableConfigs are the snapshot topic's settings a deletion changes
// for its duration, and to what: Kafka deletes records (DeleteRecords)
// only of a topic whose cleanup.policy has "delete", and with retention
// off the topic loses nothing to retention meanwhile, even if the tool
// stops before it restores them.
var deletableConfigs = []struct{ key, value string }{
	{"cleanup.policy", "compact,delete"},
	{"retention.ms", "-1"},
	{"retention.bytes", "-1"},
}

// topicConfigs reads the snapshot topic's own values (nil: not set on
// the topic, the broker's default applies) of the deletableConfigs.
func (tool *Tool) topicConfigs(ctx context.Context) (map[string]*string, error) {
	rcs, err := tool.adm.DescribeTopicConfigs(ctx, tool.t.SnapshotTopic)
	if err != nil {
		return nil, fmt.Errorf("describing the configuration of %q: %w", tool.t.SnapshotTopic, err)
	}
	rc, err := rcs.On(tool.t.SnapshotTopic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return nil, fmt.Errorf("describing the configuration of %q: %w", tool.t.SnapshotTopic, err)
	}
	out := map[string]*string{}
	for _, d := range deletableConfigs {
		out[d.key] = nil
	}
	for _, c := range rc.Configs {
		if _, ok := out[c.Key]; ok && c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil {
			v := *c.Value
			out[c.Key] = &v
		}
	}
	return out, nil
}

// deleteSnapshots deletes every record of the snapshot topic: it makes
// the topic deletable, deletes each partition's records up to the end
// the plan read, and restores the topic's own settings as p found them
// (DeleteRecords keeps the topic's id, configuration and ACLs, which
// deleting the topic would lose). An engine's warm cache is refused as
// a recovery base once the log start has reached its checkpoint.
func (tool *Tool) deleteSnapshots(ctx context.Context, p *ResetPlan) (err error) {
	topic := tool.t.SnapshotTopic
	var set []kadm.AlterConfig
	for _, d := range deletableConfigs {
		set = append(set, kadm.AlterConfig{Op: kadm.SetConfig, Name: d.key, Value: kadm.StringPtr(d.value)})
	}
	if err := tool.alterConfigs(ctx, set); err != nil {
		return err
	}
	defer func() {
		var restore []kadm.AlterConfig
		for _, d := range deletableConfigs {
			if v := p.SnapshotConfigs[d.key]; v != nil {
				restore = append(restore, kadm.AlterConfig{Op: kadm.SetConfig, Name: d.key, Value: kadm.StringPtr(*v)})
			} else {
				restore = append(restore, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: d.key})
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if rerr := tool.alterConfigs(rctx, restore); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restoring the configuration of %q (set it back by hand: %s): %w", topic, configText(p.SnapshotConfigs), rerr))
		}
	}()
	del := kadm.Offsets{}
	for _, s := range p.Snapshots {
		del.Add(kadm.Offset{Topic: topic, Partition: s.Partition, At: s.End, LeaderEpoch: -1})
	}
	// Brokers apply a configuration change a moment after it is
	// acknowledged: until then they refuse the deletion by policy.
	deadline := time.Now().Add(time.Minute)
	for {
		rs, err := tool.adm.DeleteRecords(ctx, del)
		if err == nil {
			err = rs.Error()
		}
		if err == nil || !errors.Is(err, kerr.PolicyViolation) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (tool *Tool) alterConfigs(ctx context.Context, cs []kadm.AlterConfig) error {
	rs, err := tool.adm.AlterTopicConfigs(ctx, cs, tool.t.SnapshotTopic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		r, err = rs.On(tool.t.SnapshotTopic, nil)
		if err == nil {
			err = r.Err
		}
	}
	if err != nil {
		return fmt.Errorf("altering the configuration of %q: %w", tool.t.SnapshotTopic, err)
	}
	return nil
}

// configText renders the topic's own settings.
func configText(cs map[string]*string) string {
	var out []string
	for _, d := range deletableConfigs {
		if v := cs[d.key]; v != nil {
			out = append(out, d.key+"="+*v)
		} else {
			out = append(out, d.key+" (the broker's default)")
		}
	}
	return strings.Join(out, ", ")
}

// committedOffsets is committed, with a group that does not exist (no
// offset committed, ever) read as one without offsets.
func (tool *Tool) committedOffsets(ctx context.Context) (map[int32]kadm.Offset, error) {
	c, err := tool.committed(ctx)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]kadm.Offset{}, nil
	}
	return c, err
}
