package kfakeworld

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/store/kafka"
)

// The real-broker world (Config.Brokers, here a kfake cluster on
// loopback) refuses a name whose topics exist already, and leaves those
// topics alone: it deletes only what it created.
func TestARealWorldKeepsTopicsItDidNotCreate(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Someone else's snapshot topic, under the name the world will use.
	theirs := kafka.LegacySnapshotTopic("snapfence-simulate-taken")
	if err := kafka.CreateTopic(ctx, cl, theirs, Partitions, 1, nil); err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{Brokers: c.ListenAddrs(), Name: "taken", Logf: t.Logf})
	if err == nil {
		w.Close()
		t.Fatal("a world on a name whose snapshot topic exists was opened")
	}
	if !strings.Contains(err.Error(), theirs) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("err = %v, want one naming %s as existing", err, theirs)
	}
	listed, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !listed.Has(theirs) {
		t.Errorf("the world deleted %s, which it did not create", theirs)
	}
	if listed.Has("snapfence-simulate-taken") {
		t.Errorf("the world left its input topic behind")
	}
}
