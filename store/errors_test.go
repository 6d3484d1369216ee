package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/store"
)

var tp = store.TopicPartition{Topic: "orders-snapshots", Partition: 3}

func TestIdentityValid(t *testing.T) {
	for id, want := range map[store.GroupIdentity]bool{
		{Group: "g", MemberID: "m", Generation: 1}:  true,
		{Group: "g", MemberID: "m", Generation: 0}:  false,
		{Group: "g", MemberID: "m", Generation: -1}: false,
		{Group: "g", MemberID: "", Generation: 4}:   false,
		{Group: "", MemberID: "m", Generation: 4}:   false,
	} {
		if id.Valid() != want {
			t.Errorf("%v.Valid() = %t, want %t", id, !want, want)
		}
	}
}

func TestFencedErrorMatchesSentinelAndReason(t *testing.T) {
	reason := errors.New("ILLEGAL_GENERATION")
	err := error(&store.FencedError{Input: tp, Reason: reason})
	if !errors.Is(err, store.ErrFenced) || !errors.Is(err, reason) {
		t.Fatalf("%v does not match ErrFenced and its reason", err)
	}
}

func TestStallErrorsSayWhatToDo(t *testing.T) {
	for cause, want := range map[store.StallCause]string{
		store.StallTruncation:      "log end 5 is below the target",
		store.StallOpenTransaction: "open or hanging transaction",
		store.StallUndetermined:    "cause undetermined",
	} {
		err := &store.RecoveryStalledError{Snapshots: tp, Position: 3, Target: 9, LogEnd: 5, Cause: cause, ReadErr: errors.New("x")}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "at offset 3 of target 9") {
			t.Errorf("%s: %q lacks %q", cause, err, want)
		}
	}
}
