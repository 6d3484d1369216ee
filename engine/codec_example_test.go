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
