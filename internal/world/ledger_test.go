package world

import (
	"strings"
	"testing"
)

// A stale tombstone that replaces a newer one is still a regression, and
// the report says the key was deleted rather than showing an empty value.
func TestNoStaleOverwriteNamesADeletedState(t *testing.T) {
	seen := map[string]int64{}
	if vs := CheckNoStaleOverwrite(1, seen, map[string]Visible{"a": {Offset: 1, Tombstone: true}}); len(vs) != 0 {
		t.Fatalf("first sight: %v", vs)
	}
	vs := CheckNoStaleOverwrite(2, seen, map[string]Visible{"a": {Offset: 0, Tombstone: true}})
	if len(vs) != 1 || vs[0].Invariant != 1 || vs[0].Step != 2 {
		t.Fatalf("got %v, want one violation of invariant 1 after step 2", vs)
	}
	const want = "key a: the visible snapshot went back from the fold up to input offset 1 to the one up to 0 (deleted)"
	if vs[0].Detail != want {
		t.Fatalf("detail %q, want %q", vs[0].Detail, want)
	}
	vs = CheckNoStaleOverwrite(3, seen, map[string]Visible{"a": {Offset: 0, Value: "7"}})
	if len(vs) != 1 || !strings.HasSuffix(vs[0].Detail, "(value 7)") {
		t.Fatalf("got %v, want a regression showing value 7", vs)
	}
}
