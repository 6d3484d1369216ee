package engine_test

import (
	"fmt"

	"github.com/snapfence/snapfence/engine"
)

// JSON stores any state encoding/json handles; here a struct with tags.
func ExampleJSON() {
	type order struct {
		Status string `json:"status"`
		Amount int64  `json:"amount"`
	}
	codec := engine.JSON[order]()
	b, _ := codec.Encode(order{Status: "paid", Amount: 1250})
	fmt.Println(string(b))
	o, _ := codec.Decode([]byte(`{"status":"shipped"}`)) // a missing field stays zero
	fmt.Printf("%+v\n", o)
	// Output:
	// {"status":"paid","amount":1250}
	// {Status:shipped Amount:0}
}

// Int64 stores a counter or a balance as decimal text, which Kafka's
// console consumer shows as it is.
func ExampleInt64() {
	cfg := engine.Config[int64]{
		Codec: engine.Int64(),
		Fold: func(key []byte, n int64, exists bool, rec engine.Record) (engine.Result[int64], error) {
			return engine.Set(n + 1), nil // count the key's records
		},
		// Store: a backend (store/kafka, store/sim), then engine.New(cfg).
	}
	b, _ := cfg.Codec.Encode(-42)
	n, _ := cfg.Codec.Decode(b)
	fmt.Println(string(b), n)
	_, err := cfg.Codec.Decode([]byte("forty-two"))
	fmt.Println(err)
	// Output:
	// -42 -42
	// engine: Int64 codec: strconv.ParseInt: parsing "forty-two": invalid syntax
}

// String keeps a text state, say the last status of a key.
func ExampleString() {
	b, _ := engine.String().Encode("shipped")
	s, _ := engine.String().Decode(b)
	fmt.Printf("%q %q\n", b, s)
	// Output: "shipped" "shipped"
}

// Bytes keeps the state as raw bytes, encoded by the fold itself (a
// protobuf, say).
func ExampleBytes() {
	b, _ := engine.Bytes().Encode([]byte{0x08, 0x96, 0x01})
	fmt.Printf("% x\n", b)
	// Output: 08 96 01
}

// VersionedCodec lets the state type change in a deploy without a
// reprocess. An account was a bare balance, first in engine.Int64's
// encoding, then in the same encoding behind version 1 (the codec
// wrapped as VersionedCodec{Version: 1, Current: engine.Int64(),
// Unversioned: engine.Int64().Decode}). Version 2 adds a currency: its
// codec writes version 2 and upgrades both older encodings, so recovery
// reads the old snapshots instead of stopping on them.
func ExampleVersionedCodec() {
	type account struct {
		Balance  int64  `json:"balance"`
		Currency string `json:"currency"`
	}
	fromBalance := func(b []byte) (account, error) {
		n, err := engine.Int64().Decode(b)
		return account{Balance: n, Currency: "EUR"}, err
	}
	codec := engine.VersionedCodec[account]{
		Version:     2,
		Current:     engine.JSON[account](),
		Older:       map[uint8]func([]byte) (account, error){1: fromBalance},
		Unversioned: fromBalance,
	}
	for _, snapshot := range []string{"1250", "\xf5\x011250", "\xf5\x02{\"balance\":1300,\"currency\":\"USD\"}"} {
		a, err := codec.Decode([]byte(snapshot))
		fmt.Printf("%+v %v\n", a, err)
	}
	b, _ := codec.Encode(account{Balance: 1300, Currency: "EUR"})
	fmt.Printf("%q\n", b)
	// Output:
	// {Balance:1250 Currency:EUR} <nil>
	// {Balance:1250 Currency:EUR} <nil>
	// {Balance:1300 Currency:USD} <nil>
	// "\xf5\x02{\"balance\":1300,\"currency\":\"EUR\"}"
}
