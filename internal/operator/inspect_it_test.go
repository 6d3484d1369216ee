//go:build it

package operator_test

import (
	"testing"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// On a real broker.
func TestStatusGetAndDumpOnKafka(t *testing.T) {
	inspect(t, kafkatest.Brokers(t))
}
