package engine

import (
	"fmt"
	"slices"
)

// versionMark starts a VersionedCodec's encoding. 0xf5 never starts valid
// UTF-8, so no text encoding (JSON, String, Int64's decimal) begins with
// it: bytes written before the codec was versioned are told apart.
const versionMark = 0xf5

// VersionedCodec is a Codec for a state type that changes between
// deploys: its encoding names the version that wrote it, and it reads the
// older encodings it is given, upgrading them to today's S. A deploy that
// changes the state type then recovers the old snapshots instead of
// stopping on them (or, under DiscardUndecodableState, deleting them);
// each key is written in the current version when it next changes.
//
// Encode writes 0xf5, Version, then Current's encoding. Decode reads
// Version with Current, an older version with Older, and bytes without
// the mark (written before the state was versioned) with Unversioned.
// Anything else fails naming the version, such as a newer one a
// deploy being rolled back finds: roll out a version that reads an
// encoding before one that writes it.
type VersionedCodec[S any] struct {
	// Version is the version Encode writes.
	Version uint8
	// Current encodes and decodes today's S.
	Current Codec[S]
	// Older reads the encodings earlier versions wrote, by version, and
	// upgrades each to S.
	Older map[uint8]func([]byte) (S, error)
	// Unversioned reads the bytes written before the codec was
	// versioned (the earlier codec's own encoding) and upgrades them;
	// nil: such bytes do not decode. Such bytes that start with 0xf5
	// would be taken for versioned ones: no text encoding does, a binary
	// one may.
	Unversioned func([]byte) (S, error)
}

// Encode encodes s with Current, behind the version.
func (c VersionedCodec[S]) Encode(s S) ([]byte, error) {
	b, err := c.Current.Encode(s)
	if err != nil {
		return nil, err
	}
	return append([]byte{versionMark, c.Version}, b...), nil
}

// Decode decodes b with the decoder of the version that wrote it.
func (c VersionedCodec[S]) Decode(b []byte) (S, error) {
	if len(b) == 0 || b[0] != versionMark {
		if c.Unversioned == nil {
			var zero S
			return zero, fmt.Errorf("engine: VersionedCodec: the state has no version and VersionedCodec.Unversioned is nil")
		}
		return c.Unversioned(b)
	}
	if len(b) < 2 {
		var zero S
		return zero, fmt.Errorf("engine: VersionedCodec: the state is cut short after its version mark")
	}
	v, enc := b[1], b[2:]
	if v == c.Version {
		return c.Current.Decode(enc)
	}
	if dec := c.Older[v]; dec != nil {
		return dec(enc)
	}
	var zero S
	return zero, fmt.Errorf("engine: VersionedCodec: the state is version %d, which this codec does not read (it reads %v)", v, c.versions())
}

// versions are the versions c reads, in order.
func (c VersionedCodec[S]) versions() []uint8 {
	vs := []uint8{c.Version}
	for v, dec := range c.Older {
		if dec != nil && v != c.Version {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}
