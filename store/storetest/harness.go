// Package storetest is the contract suite every store.Backend must pass.
// A backend provides a Harness; Run drives it through the same cases, each
// a short script of steps with the outcome the design requires.
package storetest

import (
	"testing"
	"time"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// Harness builds worlds for the suite.
type Harness interface {
	// Run calls body with a fresh world: a cluster with an input topic of
	// at least two partitions, its snapshot topic, and an empty consumer
	// group. A harness whose time is virtual runs body in a synctest
	// bubble.
	Run(t *testing.T, body func(t *testing.T, w World))
}

// ClusterOfItsOwn is implemented by a harness whose worlds share a
// cluster: the cases that truncate a log run through RunOnOwnCluster,
// which gives them a cluster nothing else uses (truncating a real broker's
// log means stopping it).
type ClusterOfItsOwn interface {
	RunOnOwnCluster(t *testing.T, body func(t *testing.T, w World))
}

// BackendConfig is what the suite varies between backends of a world.
type BackendConfig struct {
	Mode store.Mode
	// Application, if set, names another application than Application
	// that keeps the world's transactional.id prefix: a misconfigured
	// second application. Its snapshot topic, the default of its name,
	// is created by the backend (CreateTopics).
	Application string
	// MaxWritesPerTransaction; 0 means the default.
	MaxWritesPerTransaction int
	// MaxBytesPerTransaction; 0 means the default.
	MaxBytesPerTransaction int
	// RecoveryStallTimeout; 0 means the default.
	RecoveryStallTimeout time.Duration
	Observer             store.Observer
}

// Application is the application every world's backends are of: their
// Application, and their transactional.id prefix by default.
const Application = "sf-test"

// World is one cluster as the suite sees it. Backends of one world share
// the cluster and the transactional.id prefix, so a second backend's
// Acquire is a takeover of the first's partition.
type World interface {
	// InputTopic is the input topic's name.
	InputTopic() string
	// Backend returns a new backend on the world's cluster, closed when the
	// test ends.
	Backend(t *testing.T, cfg BackendConfig) store.Backend
	// Join adds a member to the group, subscribed to the input topic, and
	// returns once every member knows the resulting generation.
	Join(t *testing.T) Member
	// Rebalance moves the group to a new generation, keeping every member,
	// and returns once every member knows it.
	Rebalance(t *testing.T)
	// CommittedOffset reads the group's committed offset of an input
	// partition.
	CommittedOffset(t *testing.T, input store.TopicPartition) (int64, bool)
	// ReadSnapshots reads the snapshot partition of input with a
	// read_committed reader of its own, up to the last stable offset, and
	// decodes every record (offset markers skipped).
	ReadSnapshots(t *testing.T, input store.TopicPartition) []store.Snapshot
	// StableOffsets reads the snapshot partition's last stable offset and
	// high watermark.
	StableOffsets(t *testing.T, input store.TopicPartition) (lastStable, highWatermark int64)
	// CrashedOwnerTransaction leaves an open transaction on input's
	// snapshot partition under the partition's own transactional.id, as an
	// owner that crashed mid-transaction would.
	CrashedOwnerTransaction(t *testing.T, input store.TopicPartition, recs ...wire.Record)
	// CrashedOwnerOutputs leaves an open transaction under input's own
	// transactional.id holding recs in partition 0 of the output topic,
	// as an owner that crashed in the middle of an exactly-once batch
	// would.
	CrashedOwnerOutputs(t *testing.T, input store.TopicPartition, recs ...wire.Record)
	// ForeignTransaction opens a transaction of another transactional.id on
	// input's snapshot partition. With hang it never resolves by itself
	// while the test runs. end commits or aborts it.
	ForeignTransaction(t *testing.T, input store.TopicPartition, hang bool, recs ...wire.Record) (end func(commit bool))
	// ProduceForeign appends records to input's snapshot partition with a
	// plain producer.
	ProduceForeign(t *testing.T, input store.TopicPartition, recs ...wire.Record)
	// Truncate cuts input's snapshot partition back to end.
	Truncate(t *testing.T, input store.TopicPartition, end int64)
	// FailLogEndReads makes every later high-watermark read fail, and
	// returns the error those reads fail with (matched with errors.Is).
	FailLogEndReads(t *testing.T) error
	// SlowFetches makes each fetch return at most one record after latency.
	SlowFetches(t *testing.T, latency time.Duration)
	// StallTimeout is the recovery stall deadline the stall cases
	// configure, and the slack they keep on either side of it when they
	// check that a read is still waiting just before it and has failed
	// just after it. Virtual time affords (3 min, 1 s); real time needs a
	// deadline of seconds and a slack that covers a loaded machine's
	// scheduling.
	StallTimeout() (timeout, slack time.Duration)
	// Advance moves time forward by d: in virtual time once every
	// goroutine of the test is blocked; in real time it waits d.
	Advance(d time.Duration)
	// Settle returns once every goroutine of the test is blocked. A
	// real-time world cannot know that and returns at once: the suite
	// orders its steps by what it observes (Queued, recovery events), and
	// Settle only sharpens a check in virtual time.
	Settle()
	// Queued is the number of writes and commits waiting in p's queue
	// behind the transaction in flight (0 in Plain mode, where nothing
	// queues); p is a partition one of the world's backends acquired. It
	// is how the suite knows, in real time, that a write has joined the
	// queue: no part of store.Partition, so each backend's harness asks
	// its own partitions.
	Queued(p store.Partition) int
	// Now is the world's time.
	Now() time.Time
	// OutputTopic is a topic of two partitions for the outputs of
	// exactly-once batches, whose max.message.bytes is OutputMaxBytes.
	OutputTopic() string
	// ReadOutputs reads every partition of the output topic with a reader
	// of the given isolation: read_committed up to the last stable offset
	// once open transactions of the world's transactional.ids have ended,
	// read_uncommitted up to the high watermark. Control records are
	// skipped.
	ReadOutputs(t *testing.T, readCommitted bool) []OutputRecord
}

// OutputRecord is a record of the output topic as a reader saw it.
type OutputRecord struct {
	Partition  int32
	Key, Value []byte
}

// Member is a member of the world's consumer group.
type Member interface {
	// Identity is the identity the member's client reports now.
	Identity() store.GroupIdentity
}
