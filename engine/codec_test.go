package engine_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/snapfence/snapfence/engine"
)

type codecState struct {
	Name  string            `json:"name"`
	Count int               `json:"count"`
	Tags  map[string]string `json:"tags,omitempty"`
}

// Every built-in codec decodes what it encoded, for any value.
func TestBuiltInCodecsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		b := rapid.SliceOf(rapid.Byte()).Draw(t, "b")
		i := rapid.Int64().Draw(t, "i")
		u := rapid.Uint64().Draw(t, "u")
		st := codecState{Name: s, Count: rapid.Int().Draw(t, "count"),
			Tags: rapid.MapOf(rapid.String(), rapid.String()).Draw(t, "tags")}
		if len(st.Tags) == 0 {
			st.Tags = nil // omitempty: an empty map decodes as nil
		}
		roundTrip(t, engine.String(), s, func(a, b string) bool { return a == b })
		roundTrip(t, engine.Bytes(), b, func(x, y []byte) bool { return string(x) == string(y) })
		roundTrip(t, engine.Int64(), i, func(a, b int64) bool { return a == b })
		roundTrip(t, engine.Uint64(), u, func(a, b uint64) bool { return a == b })
		// encoding/json replaces invalid UTF-8 with U+FFFD: compare with
		// what json itself makes of the state.
		want := st
		if raw, err := json.Marshal(st); err == nil {
			want = codecState{}
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
		}
		roundTrip(t, engine.JSON[codecState](), st, func(_, got codecState) bool { return fmt.Sprint(got) == fmt.Sprint(want) })
	})
}

func roundTrip[S any](t *rapid.T, c engine.Codec[S], s S, eq func(a, b S) bool) {
	enc, err := c.Encode(s)
	if err != nil {
		t.Fatalf("%T.Encode(%v): %v", c, s, err)
	}
	if enc == nil {
		// A snapshot record with a null value is corrupt
		// (wire.DecodeRecord): a state must never encode as nil.
		t.Fatalf("%T.Encode(%v) = nil", c, s)
	}
	got, err := c.Decode(enc)
	if err != nil {
		t.Fatalf("%T.Decode(%q): %v", c, enc, err)
	}
	if !eq(s, got) {
		t.Fatalf("%T: %v encoded as %q decodes as %v", c, s, enc, got)
	}
}

// The integers are decimal text, readable with Kafka's console consumer.
func TestIntegerCodecsAreDecimalText(t *testing.T) {
	for n, want := range map[int64]string{0: "0", -42: "-42", math.MaxInt64: "9223372036854775807", math.MinInt64: "-9223372036854775808"} {
		if b, _ := engine.Int64().Encode(n); string(b) != want {
			t.Errorf("Int64 %d encodes as %q, want %q", n, b, want)
		}
	}
	if b, _ := engine.Uint64().Encode(math.MaxUint64); string(b) != "18446744073709551615" {
		t.Errorf("Uint64 max encodes as %q", b)
	}
}

// A value the codec cannot read fails with the parser's typed error.
func TestCodecsRejectWhatTheyCannotRead(t *testing.T) {
	var ne *strconv.NumError
	for _, in := range []string{"", "1.5", " 1", "x", "9223372036854775808"} {
		if _, err := engine.Int64().Decode([]byte(in)); !errors.As(err, &ne) {
			t.Errorf("Int64 Decode(%q) = %v, want a *strconv.NumError", in, err)
		}
	}
	for _, in := range []string{"-1", "", "18446744073709551616"} {
		if _, err := engine.Uint64().Decode([]byte(in)); !errors.As(err, &ne) {
			t.Errorf("Uint64 Decode(%q) = %v, want a *strconv.NumError", in, err)
		}
	}
	var se *json.SyntaxError
	if _, err := engine.JSON[codecState]().Decode([]byte("{")); !errors.As(err, &se) && err == nil {
		t.Errorf("JSON Decode of a truncated object = %v, want an error", err)
	}
	var te *json.UnmarshalTypeError
	if _, err := engine.JSON[codecState]().Decode([]byte(`{"count":"many"}`)); !errors.As(err, &te) {
		t.Errorf("JSON Decode of a string count = %v, want a *json.UnmarshalTypeError", err)
	}
	if _, err := engine.JSON[chan int]().Encode(make(chan int)); err == nil {
		t.Error("JSON Encode of a channel succeeded")
	}
}

// Bytes copies both ways: changing the state in place does not change an
// encoded snapshot, nor the reverse.
func TestBytesCodecCopies(t *testing.T) {
	state := []byte("abc")
	enc, _ := engine.Bytes().Encode(state)
	state[0] = 'X'
	if string(enc) != "abc" {
		t.Fatalf("encoded %q changed with the state", enc)
	}
	dec, _ := engine.Bytes().Decode(enc)
	dec[1] = 'Y'
	if string(enc) != "abc" {
		t.Fatalf("encoded %q changed with the decoded state", enc)
	}
	if enc, _ := engine.Bytes().Encode(nil); enc == nil || len(enc) != 0 {
		t.Fatalf("a nil state encodes as %#v, want an empty non-nil value", enc)
	}
}
