//go:build it

package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/service"
	"github.com/snapfence/snapfence/internal/kafkatest"
)

// TestEveryInstanceAnswersEveryKeyOnKafka: on a real broker (the classic
// group protocol, described by DescribeGroups), two instances advertise
// their endpoints and redirect each other's keys; once one stops, the
// other serves every key.
func TestEveryInstanceAnswersEveryKeyOnKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	run := time.Now().UnixNano()
	cfg := config()
	cfg.Application = fmt.Sprintf("svc-it-%d", run)
	cfg.Brokers, cfg.Input, cfg.CreateTopics, cfg.Partitions = brokers, fmt.Sprintf("orders-%d", run), true, 4
	cfg.HTTP = "127.0.0.1:0"
	a, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, a)
	checkEveryKeyAnsweredByEveryInstance(t, a, cfg)
}
