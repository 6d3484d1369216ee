package store

import "testing"

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
