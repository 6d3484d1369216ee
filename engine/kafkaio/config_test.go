package kafkaio_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"
	"github.com/snapfence/snapfence/internal/input"

	"github.com/snapfence/snapfence/store"
)

func validConfig() kafkaio.Config {
	return kafkaio.Config{SeedBrokers: []string{"127.0.0.1:9092"}, Group: "bank", Topics: []string{"accounts"}}
}

// The defaults of Config are the documented ones.
func TestConfigDefaults(t *testing.T) {
	got, err := kafkaio.ResolveConfig(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got.SessionTimeout != 10*time.Second || got.HeartbeatInterval != time.Second || got.RebalanceTimeout != time.Minute ||
		got.MaxPollRecords != 10000 || got.InstanceID != "" || got.CreateTopics || got.CreatePartitions != -1 || got.CreateReplicationFactor != -1 {
		t.Fatalf("defaults: %+v", got)
	}
	// A short session takes a third of it as the heartbeat.
	cfg := validConfig()
	cfg.SessionTimeout = 1500 * time.Millisecond
	if got, err := kafkaio.ResolveConfig(cfg); err != nil || got.HeartbeatInterval != 500*time.Millisecond {
		t.Fatalf("session 1.5s: heartbeat %v, %v", got.HeartbeatInterval, err)
	}
}

// Every value that cannot work is a *store.ConfigError naming its field
// and a fix.
func TestConfigRejectsBadValues(t *testing.T) {
	cases := []struct {
		field string
		mod   func(*kafkaio.Config)
	}{
		{"SeedBrokers", func(c *kafkaio.Config) { c.SeedBrokers = nil }},
		{"Group", func(c *kafkaio.Config) { c.Group = "" }},
		{"Topics", func(c *kafkaio.Config) { c.Topics = nil }},
		{"Topics", func(c *kafkaio.Config) { c.Topics = []string{"accounts", ""} }},
		{"Topics", func(c *kafkaio.Config) { c.Topics = []string{"my topic"} }},
		{"MaxPollRecords", func(c *kafkaio.Config) { c.MaxPollRecords = -1 }},
		{"SessionTimeout", func(c *kafkaio.Config) { c.SessionTimeout = -time.Second }},
		{"SessionTimeout", func(c *kafkaio.Config) { c.SessionTimeout = time.Millisecond }},
		{"HeartbeatInterval", func(c *kafkaio.Config) { c.HeartbeatInterval = 10 * time.Second }},
		{"HeartbeatInterval", func(c *kafkaio.Config) { c.HeartbeatInterval = -time.Second }},
		{"RebalanceTimeout", func(c *kafkaio.Config) { c.RebalanceTimeout = -time.Second }},
		{"RebalanceTimeout", func(c *kafkaio.Config) { c.RebalanceTimeout = 1000 * time.Hour }},
		{"InstanceID", func(c *kafkaio.Config) { c.InstanceID = "pod/0" }},
		{"InstanceID", func(c *kafkaio.Config) { c.InstanceID = strings.Repeat("x", 250) }},
		{"DynamicMembership", func(c *kafkaio.Config) { c.InstanceID, c.DynamicMembership = "pod-0", true }},
		{"CreatePartitions", func(c *kafkaio.Config) { c.CreatePartitions = -2 }},
		{"CreateReplicationFactor", func(c *kafkaio.Config) { c.CreateReplicationFactor = -3 }},
	}
	for _, c := range cases {
		cfg := validConfig()
		c.mod(&cfg)
		_, err := kafkaio.ResolveConfig(cfg)
		cerr, ok := errors.AsType[*store.ConfigError](err)
		if !ok || cerr.Subject != "kafkaio.Config."+c.field || cerr.Fix == "" || !errors.Is(err, store.ErrMisconfigured) {
			t.Errorf("%s: got %v, want a *store.ConfigError naming the field with a fix", c.field, err)
		}
		// Open checks before it connects: no broker listens here.
		if _, err := cfg.Open(input.Opening{}); !errors.Is(err, store.ErrMisconfigured) {
			t.Errorf("%s: Open: %v", c.field, err)
		}
	}
}
