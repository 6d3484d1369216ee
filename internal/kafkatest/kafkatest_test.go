package kafkatest

import (
	"slices"
	"testing"
)

func TestBrokersFromEnvironment(t *testing.T) {
	t.Setenv(EnvBrokers, "127.0.0.1:9092,127.0.0.1:9093")
	if !Available() {
		t.Fatal("Available() = false with the variable set")
	}
	want := []string{"127.0.0.1:9092", "127.0.0.1:9093"}
	if got := Brokers(t); !slices.Equal(got, want) {
		t.Fatalf("Brokers = %q, want %q", got, want)
	}
	t.Setenv(EnvBrokers, "")
	if Available() {
		t.Fatal("Available() = true with the variable empty")
	}
}

func TestScriptFound(t *testing.T) {
	if _, err := script(); err != nil {
		t.Fatal(err)
	}
}
