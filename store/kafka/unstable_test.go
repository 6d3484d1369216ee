package kafka

import "testing"

// The group's offsets partition is Java's String.hashCode made
// non-negative, modulo the partition count; the vectors are Java's own
// (OpenJDK 17), including a hash of Integer.MIN_VALUE and a surrogate
// pair.
func TestGroupOffsetsPartitionIsJavas(t *testing.T) {
	for _, c := range []struct {
		group string
		want  int32
	}{
		{"bank", 2},
		{"accounts-1796162133257543380-group", 5},
		{"snapfence", 5},
		{"é-groupe-ünïcode", 5},
		{"😀emoji", 27},
		{"polygenelubricants", 0}, // hashCode is Integer.MIN_VALUE
		{"GydZG_", 0},
		{"DESIGNING WORKHOUSES", 0},
	} {
		if got := javaGroupPartition(c.group, 50); got != c.want {
			t.Errorf("%q: partition %d of 50, Kafka's is %d", c.group, got, c.want)
		}
	}
}
