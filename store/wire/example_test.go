package wire_test

import (
	"fmt"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/wire"
)

// A snapshot of a key without timers is a format version 1 record; one of
// a key with timers is version 2, with the timers in a header of their own
// (a reader that knows only version 1 refuses it rather than drop them).
func ExampleEncodeSnapshot() {
	plain := store.Snapshot{Key: []byte("ada"), Value: []byte(`{"clicks":3}`), Offset: 41}
	timed := plain
	timed.Timers = []store.Timer{{Kind: store.ProcessingTime, At: 1_700_000_060_000}}
	for _, s := range []store.Snapshot{plain, timed} {
		r := wire.EncodeSnapshot("", s)
		fmt.Printf("%s=%s", r.Key, r.Value)
		for _, h := range r.Headers {
			fmt.Printf(" %s:%x", h.Key, h.Value)
		}
		fmt.Println()
		back, _, _ := wire.DecodeRecord(store.TopicPartition{Topic: "clicks-snapshots"}, 0, r)
		fmt.Printf("  offset %d, timers %v\n", back.Offset, back.Timers)
	}
	// Output:
	// ada={"clicks":3} snapfence.v:31 snapfence.k:73 snapfence.o:0000000000000029
	//   offset 41, timers []
	// ada={"clicks":3} snapfence.v:32 snapfence.k:73 snapfence.o:0000000000000029 snapfence.t:700000018bcfe65260
	//   offset 41, timers [{processing-time 1700000060000}]
}
