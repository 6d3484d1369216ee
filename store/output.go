package store

import "encoding/binary"

// OutputPartition is the partition of a topic with partitions partitions
// that Kafka's default partitioner gives a record with this key: the
// positive murmur2 hash of the key modulo the partition count. (A record
// without a key hashes as an empty key, so its partition is still fixed.)
// Outputs of snapfence and of a plain Kafka producer with the same key
// land in the same partition.
func OutputPartition(key []byte, partitions int) int32 {
	if partitions <= 0 {
		return 0
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(partitions))
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, as Kafka's
// Utils.murmur2 computes it.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := binary.LittleEndian.Uint32(b)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		b = b[4:]
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
