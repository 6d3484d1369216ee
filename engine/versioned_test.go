package engine_test

import (
	"strings"
	"testing"

	"github.com/snapfence/snapfence/engine"
)

// A VersionedCodec reads every encoding it is given: today's, an older
// version's, and the bytes written before it was versioned (including an
// empty state); it refuses a version it does not know, naming it, and
// bytes without a version when it has no Unversioned.
func TestVersionedCodecReadsItsVersions(t *testing.T) {
	upgrade := func(prefix string) func([]byte) (string, error) {
		return func(b []byte) (string, error) { return prefix + string(b), nil }
	}
	c := engine.VersionedCodec[string]{Version: 3, Current: engine.String(),
		Older: map[uint8]func([]byte) (string, error){1: upgrade("v1:"), 2: upgrade("v2:")}, Unversioned: upgrade("v0:")}
	b, err := c.Encode("now")
	if err != nil || string(b) != "\xf5\x03now" {
		t.Fatalf("Encode = %q, %v; want the mark, version 3, then the state", b, err)
	}
	for in, want := range map[string]string{"\xf5\x03now": "now", "\xf5\x01old": "v1:old", "\xf5\x02mid": "v2:mid",
		`{"n":1}`: `v0:{"n":1}`, "": "v0:", "\xf5\x03": ""} {
		if got, err := c.Decode([]byte(in)); err != nil || got != want {
			t.Fatalf("Decode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"\xf5\x04new": "version 4, which this codec does not read (it reads [1 2 3])", "\xf5": "cut short"} {
		if _, err := c.Decode([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Decode(%q) = %v, want an error saying %q", in, err, want)
		}
	}
	c.Unversioned = nil
	if _, err := c.Decode([]byte("plain")); err == nil || !strings.Contains(err.Error(), "Unversioned is nil") {
		t.Fatalf("Decode(plain) without Unversioned = %v, want an error", err)
	}
}

// Every built-in text codec's encoding is read as unversioned: none starts
// with the version mark.
func TestVersionedCodecTellsTextEncodingsApart(t *testing.T) {
	c := engine.VersionedCodec[int64]{Version: 1, Current: engine.Int64(), Unversioned: engine.Int64().Decode}
	for _, n := range []int64{0, -1, 42, -9223372036854775808} {
		old, _ := engine.Int64().Encode(n)
		if got, err := c.Decode(old); err != nil || got != n {
			t.Fatalf("Decode(%q) = %d, %v; want %d", old, got, err, n)
		}
		b, _ := c.Encode(n)
		if got, err := c.Decode(b); err != nil || got != n {
			t.Fatalf("round trip of %d = %d, %v", n, got, err)
		}
	}
}
