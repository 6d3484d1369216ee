package cache

import (
	"testing"
	"time"

	"github.com/snapfence/snapfence/store"
)

// A checkpoint decodes to what was encoded, with its group; anything
// shorter, longer or of another version does not decode; a tag accepts
// only its own group's.
func TestCheckpointCodec(t *testing.T) {
	cp := store.Checkpoint{TopicID: [16]byte{1, 2, 3, 15: 16}, Offset: 1 << 40, At: time.Unix(1700000000, 123456789)}
	for _, group := range []string{"", "bank", "view:accounts"} {
		b := EncodeCheckpoint(group, cp)
		g, got, err := DecodeCheckpoint(b)
		if err != nil || g != group || got.TopicID != cp.TopicID || got.Offset != cp.Offset || !got.At.Equal(cp.At) {
			t.Fatalf("%q: decoded %q %+v %v, want %+v", group, g, got, err, cp)
		}
		bad := [][]byte{nil, b[:len(b)-1], append(append([]byte(nil), b...), 0), append([]byte{checkpointVersion + 1}, b[1:]...)}
		for _, x := range bad {
			if _, _, err := DecodeCheckpoint(x); err == nil {
				t.Fatalf("%q: %x decoded", group, x)
			}
		}
		if got, ok := CheckpointTag(group).Decode(CheckpointTag(group).Encode(cp)); !ok || got.Offset != cp.Offset {
			t.Fatalf("%q: the tag's own checkpoint: %+v %t", group, got, ok)
		}
		if _, ok := CheckpointTag(group + "x").Decode(b); ok {
			t.Fatalf("%q: another tag accepted it", group)
		}
	}
}
