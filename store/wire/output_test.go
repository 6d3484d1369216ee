package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

func TestCheckOutputNamesWhatAndWhere(t *testing.T) {
	in := store.TopicPartition{Topic: "orders", Partition: 3}
	if err := wire.CheckOutput(in, "orders-snapshots", store.Output{Topic: "enriched", Key: []byte("k"), Value: []byte("v")}, 0); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		o    store.Output
		want string
	}{
		"no topic":       {store.Output{Key: []byte("k")}, `orders/3: output record of key "k" has no topic`},
		"snapshot topic": {store.Output{Topic: "orders-snapshots", Key: []byte("k")}, `for the snapshot topic "orders-snapshots"`},
		"too large":      {store.Output{Topic: "enriched", Key: []byte("k"), Value: make([]byte, 10)}, `output record for topic "enriched" of 11 bytes exceeds the limit of 8 bytes`},
	} {
		err := wire.CheckOutput(in, "orders-snapshots", tc.o, 8)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want it to say %q", name, err, tc.want)
		}
	}
	var vt *store.ValueTooLargeError
	if err := wire.CheckOutput(in, "s", store.Output{Topic: "t", Value: make([]byte, 9)}, 8); !errors.As(err, &vt) || !errors.Is(err, store.ErrValueTooLarge) {
		t.Fatalf("want a store.ValueTooLargeError, got %v", err)
	}
}
