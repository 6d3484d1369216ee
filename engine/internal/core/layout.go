package core

import (
	"encoding/binary"

	"github.com/snapfence/snapfence/store"
)

// StatePrefix is the KV prefix of partition tp's committed states: the
// entry of a key is at StatePrefix(tp) followed by the key. A reader of
// the KV that holds no Core (an engine.View reading the states a Core
// writes, from any goroutine) finds a key's committed state there.
func StatePrefix(tp store.TopicPartition) []byte {
	return append([]byte{'s'}, partitionPrefix(tp)...)
}

// ParseEntry splits a committed-state entry read under StatePrefix: live
// is false for a tombstone; offset is the input offset of the state (for
// a tombstone, of the delete); state is the encoded state, a slice of v
// (the key's timers, which a snapshot may carry, are passed over). ok is
// false for an entry too short, or with timers too short, to be one.
func ParseEntry(v []byte) (live bool, offset int64, state []byte, ok bool) {
	if len(v) < entryHeader {
		return false, 0, nil, false
	}
	state = v[entryHeader:]
	if v[0]&flagTimers != 0 {
		if _, state, ok = decodeTimers(state); !ok {
			return false, 0, nil, false
		}
	}
	return v[0]&flagLive != 0, int64(binary.BigEndian.Uint64(v[1:entryHeader])), state, true
}
