package operator_test

import (
	"context"
	"testing"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/service"
	"github.com/snapfence/snapfence/internal/operator/optest"
)

// On the embedded cluster (kfake), which the service starts.
func TestStatusGetAndDumpOnTheEmbeddedCluster(t *testing.T) {
	brokers := embedded(t)
	inspect(t, brokers)
}

// embedded starts an embedded cluster for the test and returns its
// brokers: a service on it, held open (not run) until the test ends.
func embedded(t *testing.T) []string {
	t.Helper()
	svc, err := service.New(context.Background(), service.Config[int64]{Application: "holder", Brokers: []string{service.Embedded},
		Input: "holder-input", Engine: optestConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	return svc.Brokers()
}

func optestConfig() engine.Config[int64] {
	return engine.Config[int64]{Fold: optest.Sum, Codec: engine.Int64()}
}
