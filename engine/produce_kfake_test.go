package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store/kafka"
)

// An output the broker refuses for good (over its topic's
// max.message.bytes) under DeadLetterPoison, at least once with the
// built-in emitter and exactly once: the input record that made it is
// dead-lettered, the run goes on, and every other record's outputs
// arrive (exactly once: once), the outputs that shared the refused one's
// poll or batch included.
func TestOutputTheBrokerRefusesIsDeadLetteredOnKfake(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(modeName(eos), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld(t)
				ctx := context.Background()
				limit := "4096"
				if err := kafka.CreateTopic(ctx, w.prod, "notes", 2, 1, map[string]*string{"max.message.bytes": &limit}); err != nil {
					t.Fatal(err)
				}
				if err := kafka.CreateTopic(ctx, w.prod, "dead", 2, 1, nil); err != nil {
					t.Fatal(err)
				}
				noise := make([]byte, 6000)
				_, _ = rand.Read(noise)
				long := base64.StdEncoding.EncodeToString(noise)
				e := w.engineWith(func(c *engine.Config[int]) {
					c.Fold, c.CommitInterval = notedTo("notes"), 100*time.Millisecond
					c.Poison, c.DeadLetterTopic = engine.DeadLetterPoison, "dead"
					c.OutputTopics = []string{"notes"}
					if eos {
						c.ExactlyOnce = true
						return
					}
					em, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: w.c.ListenAddrs(), ClientOpts: []kgo.Opt{kgo.Dialer(w.net.DialContext)}})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = em.Close() })
					c.StartEmit = em.StartEmit
				})
				w.produce("bob=+5", "bob=first note", "bob="+long, "bob=+2", "carol=small note", "alice=+1")
				r := w.runner(e, protocols["classic-cooperative"])
				w.drain(r)
				w.check(r)
				notes := readOutputs(t, w.opts(), w.adm, "notes", true)
				if notes[long] != 0 || notes["first note"] < 1 || notes["small note"] < 1 || eos && (notes["first note"] != 1 || notes["small note"] != 1) {
					t.Fatalf("notes read_committed: %v; want first and small note (exactly once: once), not the long one", notes)
				}
				dead := readOutputs(t, w.opts(), w.adm, "dead", true)
				if dead[long] < 1 || len(dead) != 1 || eos && dead[long] != 1 {
					t.Fatalf("dead letters read_committed: %d of them, the long note's %d times; want the long note's (exactly once: once)", len(dead), dead[long])
				}
				if err := r.Close(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
