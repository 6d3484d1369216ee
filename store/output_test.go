package store

import (
	"errors"
	"strings"
	"testing"
)

// Kafka's own test vectors for Utils.murmur2 (UtilsTest.testMurmur2).
func TestMurmur2MatchesKafka(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
	if p := OutputPartition([]byte("foobar"), 7); p < 0 || p >= 7 {
		t.Fatalf("OutputPartition out of range: %d", p)
	}
}

func TestCheckOutputNamesWhatAndWhere(t *testing.T) {
	in := TopicPartition{Topic: "orders", Partition: 3}
	if err := CheckOutput(in, "orders-snapshots", Output{Topic: "enriched", Key: []byte("k"), Value: []byte("v")}, 0); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		o    Output
		want string
	}{
		"no topic":       {Output{Key: []byte("k")}, `orders/3: output record of key "k" has no topic`},
		"snapshot topic": {Output{Topic: "orders-snapshots", Key: []byte("k")}, `for the snapshot topic "orders-snapshots"`},
		"too large":      {Output{Topic: "enriched", Key: []byte("k"), Value: make([]byte, 10)}, `output record for topic "enriched" of 11 bytes exceeds the limit of 8 bytes`},
	} {
		err := CheckOutput(in, "orders-snapshots", tc.o, 8)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want it to say %q", name, err, tc.want)
		}
	}
	var vt *ValueTooLargeError
	if err := CheckOutput(in, "s", Output{Topic: "t", Value: make([]byte, 9)}, 8); !errors.As(err, &vt) || !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("want a ValueTooLargeError, got %v", err)
	}
}
