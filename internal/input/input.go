// Package input is the seam between the engine's runtime and the group
// consumers it folds from: the Source a member drives, and the Handler
// the source's rebalance callbacks reach. A user hands the engine an
// engine.Input, which opens a Source; the Kafka adapter (engine/kafkaio)
// and the simulated cluster's (engine/simsource) make them. Only this
// module's packages may import it (its harnesses wrap a Handler to watch
// or cut the callbacks), so the seam stays out of the user's API.
package input

import (
	"context"
	"fmt"
	"time"

	"github.com/snapfence/snapfence/store"
)

// Record is one input record as a source polls it. The engine's Record
// (the fold's) and its core's have the same fields: each converts to the
// other in place.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
	Headers   []store.Header
	// Now is the poll's time on the source's clock, set by the engine
	// before the fold (engine.Record.Now).
	Now time.Time
}

// GroupPartition is one input partition as the consumer group's
// coordinator and the partition's leader report it (engine.GroupPartition,
// the same fields).
type GroupPartition struct {
	Input                        store.TopicPartition
	CommittedOffset              int64 // -1 if none
	LogStartOffset, LogEndOffset int64
	Assigned                     bool
	Endpoint                     string
	Owner                        string
}

// GroupReport is the whole group's view of the topics a source consumes:
// every partition, by topic then partition, and the group's members by
// name (a member's instance id if it is static, else its member id),
// sorted, whether or not they are assigned anything.
type GroupReport struct {
	Partitions []GroupPartition
	Members    []string
}

// MemberName is the name a member goes by in a GroupReport: its instance
// id if it is static, else its member id.
func MemberName(id store.GroupIdentity) string {
	if id.InstanceID != "" {
		return id.InstanceID
	}
	return id.MemberID
}

// Source is the group consumer one member of the engine drives, from one
// goroutine (the polling one) but for Go's work, which runs beside it.
type Source interface {
	// Poll polls once, waiting for records at most as long as wait says,
	// and returns the records fetched. It calls wait once the poll has
	// its turn, after any rebalance callback that went first (a callback
	// that starts recoveries shortens the wait). Rebalance callbacks
	// reach the Handler the source was opened with: inside Poll (the
	// sim) or between a PollDone and the next Poll (franz-go).
	Poll(ctx context.Context, wait func() time.Duration) ([]Record, error)
	// PollDone ends the processing of a poll; rebalances may run now.
	PollDone()
	// Identity is the group identity the client reports now.
	Identity() store.GroupIdentity
	// CommittedOffset reads the group's committed offset of tp, or the
	// offset the input would reset to if none is committed.
	CommittedOffset(ctx context.Context, tp store.TopicPartition) (int64, error)
	// ConfirmOwner asks the group's coordinator whether it lists the
	// member id of id as tp's owner now: nil if it does, a *NotOwnerError
	// if it does not (the member was evicted, tp moved, or a classic
	// group is rebalancing), another error if the coordinator did not
	// answer. The runtime asks before a restart outside a rebalance
	// callback: a member that slept through its eviction has not heard of
	// it yet, and its takeover would fence the new owner's producer.
	ConfirmOwner(ctx context.Context, tp store.TopicPartition, id store.GroupIdentity) error
	// Seek makes the next fetch of tp start at offset.
	Seek(tp store.TopicPartition, offset int64)
	// Pause stops fetching tp; Resume starts again.
	Pause(tp store.TopicPartition)
	Resume(tp store.TopicPartition)
	// Now is the source's clock (virtual for the sim).
	Now() time.Time
	// Sleep waits d on the source's clock, or until ctx ends: the
	// backoff after a poll that failed.
	Sleep(ctx context.Context, d time.Duration)
	// Go runs f off the polling goroutine: the takeovers and recoveries
	// of new partitions run there while the others fold. Once f
	// returns, the poll in flight, if any, ends, so that its outcome is
	// taken in at once. The Kafka source runs f on a goroutine of its
	// own; the simulated cluster's runs it at once, on the caller's
	// goroutine, so that its runs stay reproducible (a recovery there
	// ends within the callback that starts it).
	Go(f func())
	// LogEnd is tp's log end offset (high watermark) as the source last
	// learnt it; ok is false while it knows none. The runtime calls it
	// after each poll, on the polling goroutine, for its status and lag.
	LogEnd(tp store.TopicPartition) (offset int64, ok bool)
	// Partitions lists every partition of the topics the source
	// consumes (the standby replicas follow those it is not assigned).
	Partitions(ctx context.Context) ([]store.TopicPartition, error)
	// DescribeGroup is the whole group's view of the topics the source
	// consumes (the group report).
	DescribeGroup(ctx context.Context) (GroupReport, error)
	// CheckTopics checks that topics exist (the default check of the
	// output topics): a missing one is a *store.ConfigError naming it.
	CheckTopics(ctx context.Context, topics []string) error
	// Close leaves the group (running the revoke callbacks).
	Close(ctx context.Context) error
}

// Handler receives a source's rebalance callbacks. Each returns only when
// the engine is done with the partitions: a revoked partition's flow is
// gone when Revoked returns.
type Handler interface {
	Assigned(ctx context.Context, tps []store.TopicPartition)
	Revoked(ctx context.Context, tps []store.TopicPartition)
	Lost(ctx context.Context, tps []store.TopicPartition)
}

// Opening is what the engine tells an input as it opens its source.
type Opening struct {
	// Handler receives the source's rebalance callbacks.
	Handler Handler
	// Application is the engine's store's application name (store.Named):
	// the group an input joins when it is given none.
	Application string
	// Instance is a stable identity of the member's local state (the
	// engine's on-disk cache's; "" without one): an input whose group
	// supports static membership joins with it when it is given no
	// identity of its own, so that a restart on the same state gets back
	// the partitions that state holds.
	Instance string
	// Warm lists, for group, the partitions whose state the member's
	// cache holds with a checkpoint (owned, followed by a standby
	// replica, or kept from before a restart), safe to call from any
	// goroutine: an input whose group balancer can weigh them gives a
	// partition that moves to a member that holds it warm. Nil: none.
	Warm func(group string) []store.TopicPartition
	// WarmUp, if not nil, says that the member can warm partitions up:
	// an input whose group balancer moves a partition only to a member
	// that has caught it up calls it with the partitions the member's
	// assignment names to warm up (after each assignment; none clears
	// them), from any goroutine. The member follows them as replicas
	// and, once they are caught up, lists them in WarmedUp and calls the
	// source's Rebalance (Rebalancer).
	WarmUp func(parts []store.TopicPartition)
	// WarmedUp lists the warm-ups the member has caught up (within
	// WarmUpLag of the log end), safe to call from any goroutine.
	WarmedUp func() []store.TopicPartition
}

// WarmUpLag is how far (in snapshot-partition records) behind the log
// end a warm-up may be to count as caught up: its takeover then recovers
// at most this many records (Kafka Streams' acceptable.recovery.lag).
const WarmUpLag = 10_000

// Rebalancer is a Source whose member can ask its group to rebalance: it
// rejoins with its current metadata (Opening.WarmedUp), and the group's
// balancer may move partitions to it.
type Rebalancer interface {
	Rebalance()
}

// OpenFunc is an engine.Input made of its Open: for harnesses that wrap
// another input's Handler (to count the callbacks, or cut them when the
// process they play dies).
type OpenFunc func(Opening) (Source, error)

// Open calls f.
func (f OpenFunc) Open(o Opening) (Source, error) { return f(o) }

// Wrapped is in with the engine's Handler wrapped by wrap: the source's
// callbacks reach wrap's Handler, which passes them on (or not).
func Wrapped(in interface{ Open(Opening) (Source, error) }, wrap func(Handler) Handler) OpenFunc {
	return func(o Opening) (Source, error) {
		o.Handler = wrap(o.Handler)
		return in.Open(o)
	}
}

// NotOwnerError: the coordinator does not list the member as the
// partition's owner (Source.ConfirmOwner). It matches store.ErrFenced, as
// a commit the coordinator rejects does: the member lost the partition,
// or rejoins and hears of it at its next poll.
type NotOwnerError struct {
	Input    store.TopicPartition
	Identity store.GroupIdentity
	// Why is what the coordinator answered ("the member is unknown", "the
	// member is assigned other partitions", "the group is rebalancing").
	Why string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("%s: restart refused before its takeover: the coordinator does not list %s as its owner: %s", e.Input, e.Identity, e.Why)
}

// Is matches store.ErrFenced.
func (e *NotOwnerError) Is(target error) bool { return target == store.ErrFenced }
