package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The built-in codecs. Each is a Codec for a common state type, so a user
// who needs nothing else writes only the fold:
//
//   - JSON[S]: any type encoding/json handles, as JSON;
//   - String: a string, as its bytes;
//   - Bytes: a []byte, as itself;
//   - Int64 and Uint64: an integer, as decimal text ("-42").
//
// Their encodings are plain on purpose: a snapshot topic read with Kafka's
// own tools (kafka-console-consumer.sh) shows the state as it is. A
// codec's encoding is the format of the snapshots already written: changing
// the codec of a running application (from Int64 to JSON, or to a struct
// with fields of other types) makes the next recovery fail to decode the
// old snapshots, unless the new codec reads the old format too
// (VersionedCodec).

// JSON returns a codec that encodes a state with encoding/json
// (json.Marshal) and decodes it with json.Unmarshal into a zero S. The
// usual encoding/json rules apply: exported fields only, struct tags
// honoured, and a field that the JSON lacks keeps its zero value, so a
// field added to S later decodes older snapshots as zero. A decode error
// is json's, wrapped (errors.As finds a *json.SyntaxError or a
// *json.UnmarshalTypeError).
func JSON[S any]() Codec[S] { return jsonCodec[S]{} }

type jsonCodec[S any] struct{}

func (jsonCodec[S]) Encode(s S) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("engine: JSON codec: encoding %T: %w", s, err)
	}
	return b, nil
}

func (jsonCodec[S]) Decode(b []byte) (S, error) {
	var s S
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("engine: JSON codec: decoding %T: %w", s, err)
	}
	return s, nil
}

// String returns a codec for a string state: its bytes, unchanged (no
// check that they are UTF-8).
func String() Codec[string] { return stringCodec{} }

type stringCodec struct{}

func (stringCodec) Encode(s string) ([]byte, error) { return []byte(s), nil }
func (stringCodec) Decode(b []byte) (string, error) { return string(b), nil }

// Bytes returns a codec for a []byte state: the bytes themselves. Both
// directions copy, so neither the state the fold keeps nor the encoded
// snapshot changes when the other is modified in place. A nil state
// encodes as an empty value and decodes as an empty, non-nil slice.
func Bytes() Codec[[]byte] { return bytesCodec{} }

type bytesCodec struct{}

func (bytesCodec) Encode(s []byte) ([]byte, error) { return append([]byte{}, s...), nil }
func (bytesCodec) Decode(b []byte) ([]byte, error) { return append([]byte{}, b...), nil }

// Int64 returns a codec for an int64 state, as decimal text
// (strconv.FormatInt: "-42"). Decoding accepts exactly that form (no
// spaces, no "+" sign, no leading zeros are produced but "007" is read as
// 7); a value that is not a decimal int64 fails with a *strconv.NumError,
// wrapped.
func Int64() Codec[int64] { return int64Codec{} }

type int64Codec struct{}

func (int64Codec) Encode(n int64) ([]byte, error) { return strconv.AppendInt(nil, n, 10), nil }

func (int64Codec) Decode(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("engine: Int64 codec: %w", err)
	}
	return n, nil
}

// Uint64 returns a codec for a uint64 state, as decimal text
// (strconv.FormatUint); decoding fails with a wrapped *strconv.NumError on
// anything else, a sign included.
func Uint64() Codec[uint64] { return uint64Codec{} }

type uint64Codec struct{}

func (uint64Codec) Encode(n uint64) ([]byte, error) { return strconv.AppendUint(nil, n, 10), nil }

func (uint64Codec) Decode(b []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("engine: Uint64 codec: %w", err)
	}
	return n, nil
}
