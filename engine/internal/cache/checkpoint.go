package cache

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/snapfence/snapfence/store"
)

// checkpointVersion is the first byte of an encoded checkpoint.
const checkpointVersion = 1

// EncodeCheckpoint is the cache's record of cp, written for group: the
// group is kept so that a checkpoint is trusted only by the group that
// wrote it.
func EncodeCheckpoint(group string, cp store.Checkpoint) []byte {
	b := []byte{checkpointVersion}
	b = binary.AppendUvarint(b, uint64(len(group)))
	b = append(b, group...)
	b = append(b, cp.TopicID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(cp.Offset))
	return binary.BigEndian.AppendUint64(b, uint64(cp.At.UnixNano()))
}

var errBadCheckpoint = errors.New("engine: unreadable checkpoint")

// DecodeCheckpoint reads what EncodeCheckpoint wrote; anything else (a
// cache of another snapfence, or damage) is an error.
func DecodeCheckpoint(b []byte) (group string, cp store.Checkpoint, err error) {
	if len(b) < 1 || b[0] != checkpointVersion {
		return "", cp, errBadCheckpoint
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || uint64(len(b)-1-w) != n+16+16 {
		return "", cp, errBadCheckpoint
	}
	rest := b[1+w:]
	group, rest = string(rest[:n]), rest[n:]
	copy(cp.TopicID[:], rest[:16])
	cp.Offset = int64(binary.BigEndian.Uint64(rest[16:24]))
	cp.At = time.Unix(0, int64(binary.BigEndian.Uint64(rest[24:32])))
	return group, cp, nil
}

// CheckpointTag records a replica's checkpoints in the cache under a
// group (replica.Checkpoints): a standby's under the engine's consumer
// group, so that a takeover recovers from it, a view's or table's under
// a tag no Kafka group has, so that no engine ever trusts it.
type CheckpointTag string

// Encode is EncodeCheckpoint under the tag.
func (t CheckpointTag) Encode(cp store.Checkpoint) []byte { return EncodeCheckpoint(string(t), cp) }

// Decode is DecodeCheckpoint, accepting only a checkpoint of the tag.
func (t CheckpointTag) Decode(b []byte) (store.Checkpoint, bool) {
	group, cp, err := DecodeCheckpoint(b)
	return cp, err == nil && group == string(t)
}
