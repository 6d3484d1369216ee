// Package operator is what the snapfence command does against a cluster:
// it looks at an application's partitions, state and transactions, checks
// the invariants that can be checked from outside, and repairs or resets
// an application while none of its members runs. Each verb returns a
// report that renders as JSON for scripts and as text for people.
package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// Conn is how the tool reaches the cluster: the settings an engine's
// store takes (kafka.Config's SeedBrokers, TLS and SASL).
type Conn struct {
	Brokers []string
	TLS     *tls.Config
	SASL    sasl.Mechanism
}

// Target names the application the tool looks at, as its store names
// what it owns.
type Target struct {
	// Application is the application's name (kafka.Config.Application).
	// Required.
	Application string
	// Input is the input topic. Required.
	Input string
	// Group is the application's consumer group; default Application
	// (as engine/service names it).
	Group string
	// SnapshotTopic is the input's snapshot topic; default
	// kafka.DefaultSnapshotTopic(Application, Input).
	SnapshotTopic string
	// TransactionalIDPrefix is the prefix of the application's
	// transactional.ids; default Application.
	TransactionalIDPrefix string
	// Plain: the application runs in store.Plain mode, which has no
	// transactions and commits its offsets through its consumer.
	Plain bool
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// withDefaults checks t and fills in its defaults.
func (t Target) withDefaults() (Target, error) {
	switch {
	case t.Application == "":
		return t, errors.New("the application is required (-app)")
	case !validName.MatchString(t.Application):
		return t, fmt.Errorf("application %q: only letters, digits, '.', '_' and '-'", t.Application)
	case t.Input == "":
		return t, errors.New("the input topic is required (-input)")
	}
	if t.Group == "" {
		t.Group = t.Application
	}
	if t.SnapshotTopic == "" {
		t.SnapshotTopic = kafka.DefaultSnapshotTopic(t.Application, t.Input)
	}
	if t.TransactionalIDPrefix == "" {
		t.TransactionalIDPrefix = t.Application
	}
	return t, nil
}

// Tool is a connection to a cluster for one application.
type Tool struct {
	t         Target
	conn      Conn
	cl        *kgo.Client
	adm       *kadm.Client
	store     *kafka.Backend // Transactional mode only
	bootstrap string
}

// Open connects to the cluster for t. Close it when done.
func Open(ctx context.Context, conn Conn, t Target, log *slog.Logger) (*Tool, error) {
	t, err := t.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(conn.Brokers) == 0 {
		return nil, errors.New("no brokers given (-brokers host:port,...)")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := conn.clientOpts()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	tool := &Tool{t: t, conn: conn, cl: cl, adm: kadm.NewClient(cl), bootstrap: conn.Brokers[0]}
	if !t.Plain {
		snaps := t.SnapshotTopic
		tool.store, err = kafka.New(ctx, kafka.Config{Mode: store.Transactional, SeedBrokers: conn.Brokers,
			Application: t.Application, TransactionalIDPrefix: t.TransactionalIDPrefix,
			SnapshotTopic: func(string) string { return snaps }, TLS: conn.TLS, SASL: conn.SASL, Logger: log})
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("connecting to %v: %w", conn.Brokers, err)
		}
	}
	return tool, nil
}

func (c Conn) clientOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	return opts
}

// Close closes the tool's clients.
func (tool *Tool) Close() {
	if tool.store != nil {
		_ = tool.store.Close()
	}
	tool.cl.Close()
}

// Target is the tool's target, defaults filled in.
func (tool *Tool) Target() Target { return tool.t }

// inputPartitions returns the input topic's partition count, failing
// with ErrTopicMissing for a topic that does not exist.
func (tool *Tool) partitions(ctx context.Context, topic string) (int32, error) {
	ts, err := tool.adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describing topic %q: %w", topic, err)
	}
	d, ok := ts[topic]
	if !ok || d.Err != nil {
		if d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return 0, fmt.Errorf("describing topic %q: %w", topic, d.Err)
		}
		return 0, fmt.Errorf("topic %q: %w", topic, ErrTopicMissing)
	}
	return int32(len(d.Partitions)), nil
}

// ErrTopicMissing: a topic the verb needs does not exist.
var ErrTopicMissing = errors.New("does not exist")
