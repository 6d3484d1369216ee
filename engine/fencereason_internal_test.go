package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/snapfence/snapfence/internal/input"
	"github.com/snapfence/snapfence/store"
)

// A fence's reason label is the coordinator's error name, found through
// any wrapping of the *store.FencedError; anything else has a bounded
// label too.
func TestFenceReason(t *testing.T) {
	tp := store.TopicPartition{Topic: "accounts", Partition: 1}
	for _, c := range []struct {
		err  error
		want string
	}{
		{&store.FencedError{Input: tp, Reason: kerr.IllegalGeneration}, "ILLEGAL_GENERATION"},
		{fmt.Errorf("engine: batch: %w", &store.FencedError{Input: tp, Reason: kerr.ProducerFenced}), "PRODUCER_FENCED"},
		{&store.FencedError{Input: tp, Reason: errors.New("gone")}, "other"},
		{store.ErrFenced, "fenced"},
		{fmt.Errorf("engine: acquiring %s: %w", tp, &input.NotOwnerError{Input: tp, Why: "the member is unknown"}), "not_owner"},
	} {
		if got := fenceReason(c.err); got != c.want {
			t.Errorf("fenceReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
