//go:build it

package main

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

func TestEveryVerbOnKafka(t *testing.T) {
	everyVerb(t, kafkatest.Brokers(t))
}
