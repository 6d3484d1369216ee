package engine_test

import (
	"context"
	"sync"
	"testing"

	"github.com/snapfence/snapfence/engine"
)

// moveCounter is an Observer of two events: embedding NopObserver is all
// the rest takes.
type moveCounter struct {
	engine.NopObserver
	mu     sync.Mutex
	folded map[string]int
	states map[engine.PartitionState]int // partitions per state
}

func (o *moveCounter) Folded(topic string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.folded[topic] += n
}

func (o *moveCounter) PartitionMoved(from, to engine.PartitionState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if from != "" {
		o.states[from]--
	}
	if to != "" {
		o.states[to]++
	}
}

func (o *moveCounter) snapshot() (map[string]int, map[engine.PartitionState]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	folded, states := map[string]int{}, map[engine.PartitionState]int{}
	for k, v := range o.folded {
		folded[k] = v
	}
	for k, v := range o.states {
		if v != 0 {
			states[k] = v
		}
	}
	return folded, states
}

// An Observer hears every record folded and every partition's moves, and
// a closed runner's partitions leave every state.
func TestObserverHearsFoldsAndPartitionMoves(t *testing.T) {
	o := &moveCounter{folded: map[string]int{}, states: map[engine.PartitionState]int{}}
	w := newSimWorld(t)
	r := w.runner(w.engineWith(func(c *engine.Config[int]) { c.Observer = o }))
	w.produce("alice=+1", "bob=+2", "alice=+3")
	w.drain(r)
	folded, states := o.snapshot()
	if folded["accounts"] != 3 || len(folded) != 1 {
		t.Fatalf("folded %v, want accounts: 3", folded)
	}
	if n := len(r.Flows()); n != 2 || states[engine.StateRunning] != n || len(states) != 1 {
		t.Fatalf("states %v with %d flows, want both partitions running", states, n)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, states := o.snapshot(); len(states) != 0 {
		t.Fatalf("states %v after the runner closed, want none", states)
	}
}
