package engine

import (
	"errors"
	"fmt"

	"github.com/snapfence/snapfence/store"
)

// ErrNoGroupReport is what Locate returns before the runner has read its
// first group report (Config.GroupReportInterval): it cannot yet tell
// which instance serves a key another instance owns. Retry shortly.
var ErrNoGroupReport = errors.New("engine: no group report read yet")

// Location is where a key's state is served: its input partition, and
// which instance of the group serves it.
type Location struct {
	Input store.TopicPartition
	// Local: this instance serves the partition now (it is assigned here
	// and running): a query here answers.
	Local bool
	// Assigned: the group has the partition assigned to a member, as the
	// last group report read it (or it is assigned here).
	Assigned bool
	// Endpoint is the endpoint that member advertises
	// (kafkaio.Config.Endpoint), as the last group report read it; ""
	// when the partition is unassigned, or its member advertises none.
	// A report is at most Config.GroupReportInterval old, so right after
	// a rebalance it may name the previous owner, which then answers
	// ErrNotOwned: ask again.
	Endpoint string
}

// Locate says which input partition of topic holds key (Config.Partitioner
// over the topic's partition count) and which instance serves it: this
// one, or the member the group has it assigned to, with the endpoint it
// advertises. It reads the runner's last group report, so it never
// waits: ErrNoGroupReport before the first, and an error naming topic if
// it is not one of the input's.
func (e *Engine[S]) Locate(topic string, key []byte) (Location, error) {
	b := e.board.Load()
	if b == nil {
		return Location{}, ErrNoGroupReport
	}
	b.mu.Lock()
	n, reported := b.counts[topic], b.counts != nil
	tp := store.TopicPartition{Topic: topic}
	var endpoint string
	var assigned bool
	if n > 0 {
		tp.Partition = e.cfg.partitioner()(key, n)
		endpoint, assigned = b.endpoints[tp]
	}
	here := b.parts[tp]
	b.mu.Unlock()
	switch {
	case !reported:
		return Location{}, ErrNoGroupReport
	case n == 0:
		return Location{}, fmt.Errorf("engine: locating a key: %q is not an input topic", topic)
	}
	loc := Location{Input: tp, Assigned: assigned || here != nil, Endpoint: endpoint}
	if r := e.runner.Load(); r != nil && here != nil {
		loc.Local = r.queries.get(tp) != nil
	}
	return loc, nil
}

// partitioner is Partitioner or its default.
func (cfg *Config[S]) partitioner() func([]byte, int32) int32 {
	if cfg.Partitioner != nil {
		return cfg.Partitioner
	}
	return func(key []byte, n int32) int32 { return store.OutputPartition(key, int(n)) }
}
