//go:build it

package engine_test

import (
	"log/slog"
	"testing"

	"github.com/snapfence/snapfence/engine"
)

// The standby failover (standbyFailover) against Kafka 4.3.1.
func TestStandbyFailoverOnKafka(t *testing.T) {
	w := newBrokerWorld(t)
	protocol := protocols["classic-eager"]
	standbyFailover(t, standbyTier{
		produce: w.produce, caughtUp: w.caughtUp, wait: waitFor,
		members: func(logs [2]*logCount) (*engine.Member[int], func(), *engine.Member[int]) {
			with := func(i int) func(*engine.Config[int]) {
				return func(c *engine.Config[int]) { c.StandbyReplicas, c.Logger = 1, slog.New(logs[i]) }
			}
			a, k := w.killableRunnerWith(protocol, with(0))
			return a, func() { crashAndLeave(t, a, k) }, w.runnerWith(protocol, with(1))
		},
		fresh: func() *engine.Member[int] { return w.runner(protocol) },
		drain: w.drain, check: w.check,
	})
}
