package service

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/store"
)

// Embedded, as the one entry of Config.Brokers, runs the service on a
// Kafka cluster inside the process (franz-go's kfake, on 127.0.0.1, in
// memory): the quickstart's and a laptop's cluster, gone when Run
// returns. Change it to a broker's "host:port" and nothing else changes.
const Embedded = "embedded"

// DefaultEmbeddedPartitions is the partition count of a topic the
// embedded cluster creates.
const DefaultEmbeddedPartitions = 3

// Config is a service: one application on one input topic, with its
// brokers, security, topics, HTTP endpoint and metrics given once. New
// builds the snapshot store, the consumer, the output producer and the
// Prometheus metrics from it. Zero values take the defaults given; New
// checks every field in one place, and a value that cannot work is a
// *store.ConfigError naming it ("service.Config.Brokers").
type Config[S any] struct {
	// Application names the application, once, unique on the cluster
	// like a group id (letters, digits, '.', '_' and '-'): its consumer
	// group, its snapshot topic ("<Application>-<Input>-snapshots"), its
	// transactional ids and its cache are named from it, and another
	// application's state is refused, never read or overwritten.
	// Required.
	Application string
	// Brokers are the seed brokers, "host:port", or []string{Embedded}
	// for a cluster inside the process. Required.
	Brokers []string
	// TLS, if set, dials every broker with TLS; SASL, if set,
	// authenticates every connection. Both apply to every client the
	// service makes.
	TLS  *tls.Config
	SASL sasl.Mechanism
	// ClientOpts are appended to the options of every franz-go client
	// the service makes (a dialer, a logger, timeouts); rarely needed.
	ClientOpts []kgo.Opt
	// Input is the topic the fold reads, keyed by what the state is
	// kept per. Required. (An engine of several input topics is built
	// with engine.New and package engine/kafkaio directly.)
	Input string
	// CreateTopics creates every missing topic the service uses, with
	// Partitions partitions: the input, the snapshot topic (compacted,
	// with the input's partition count), the output topics (at first
	// use, or at start when listed in Engine.OutputTopics) and the
	// topics of the lookup tables (compacted). Off by default: on a
	// shared cluster a wrong name should fail, naming the topic, not
	// create an empty one. The embedded cluster creates them either way.
	CreateTopics bool
	// Partitions is the partition count of the topics CreateTopics
	// creates, but the snapshot topic, which takes the input's. Default:
	// the broker's num.partitions (DefaultEmbeddedPartitions on the
	// embedded cluster). The input's count is the service's
	// parallelism, and changing it later moves keys away from their
	// state: choose it with care.
	Partitions int32
	// HTTP, if set, is the address Run serves Handler at (":8080"): the
	// health probes, the metrics and the queries by key. Default "": no
	// server (mount Handler in one of your own).
	HTTP string
	// Endpoint is the URL other instances send a client to for a key
	// this instance serves ("http://10.0.0.5:8080"): advertised to the
	// group, read back by every instance's Locate and by the query
	// handler's redirects. Default: "http://" plus the host's name and
	// the port HTTP listens on when HTTP is set (set it to an address the other
	// instances can reach, such as a pod's IP, where the host's name does
	// not resolve), else "" (nothing advertised).
	Endpoint string
	// Registry is where the service registers its Prometheus metrics, and
	// what Handler's /metrics serves. Default: a registry of its own.
	Registry *prometheus.Registry
	// Engine is the fold and its settings (engine.Config): Fold and Codec
	// are required; ExactlyOnce chooses exactly-once outputs (off: at
	// least once, through the service's producer). The service sets
	// Store, StartEmit, CheckOutputTopics and Observer: leave them unset.
	// Engine.Dir, if set, keeps the cache on disk across restarts (not
	// with the embedded cluster, which does not outlive the process), and
	// makes the instance a static member of its group, so that a restart
	// within the session timeout gets back the partitions its cache holds
	// (kafkaio.Config.InstanceID; docs/operations.md, "Rolling restarts").
	Engine engine.Config[S]
	// LeaveOnStop makes the instance leave its group for good when Run
	// ends, even as a static member (Engine.Dir set), so that its
	// partitions move at once: for an instance that will not come back
	// (a scale-in). Default false: a static member's partitions wait
	// for its restart, up to the session timeout
	// (kafkaio.Config.LeaveOnClose).
	LeaveOnStop bool
}

// embedded reports whether cfg runs on the embedded cluster.
func (cfg *Config[S]) embedded() bool {
	return len(cfg.Brokers) == 1 && cfg.Brokers[0] == Embedded
}

// badConfig is the *store.ConfigError for a Config field.
func badConfig(field, problem, fix string) error {
	return &store.ConfigError{Subject: "service.Config." + field, Problem: problem, Fix: fix}
}

// check is every check of a Config, in one place: the first field that
// cannot work, as a *store.ConfigError. The engine's own fields are
// checked by engine.New.
func (cfg *Config[S]) check() error {
	switch {
	case cfg.Application == "":
		return badConfig("Application", "empty", `name the application, e.g. "order-totals"; it names the group, the snapshot topic and the transactional ids`)
	case store.NameProblem(cfg.Application) != "":
		return badConfig("Application", fmt.Sprintf("%q: %s", cfg.Application, store.NameProblem(cfg.Application)), "use letters, digits, '.', '_' and '-'")
	case len(cfg.Brokers) == 0:
		return badConfig("Brokers", "empty", `name at least one broker, "host:port", or use []string{service.Embedded} for a cluster inside the process`)
	case cfg.Input == "":
		return badConfig("Input", "empty", "name the input topic")
	case cfg.Partitions < 0:
		return badConfig("Partitions", fmt.Sprintf("%d is negative", cfg.Partitions), "leave it 0 for the broker's default, or give a count")
	}
	if err := cfg.checkBrokers(); err != nil {
		return err
	}
	if err := cfg.checkHTTP(); err != nil {
		return err
	}
	return cfg.checkEngine()
}

func (cfg *Config[S]) checkBrokers() error {
	for i, b := range cfg.Brokers {
		if b == Embedded && len(cfg.Brokers) > 1 {
			return badConfig("Brokers", "service.Embedded with other brokers", "give either []string{service.Embedded} or the brokers")
		}
		if b == Embedded {
			continue
		}
		if _, _, err := net.SplitHostPort(b); err != nil {
			return badConfig(fmt.Sprintf("Brokers[%d]", i), fmt.Sprintf("%q is not host:port: %v", b, err), `give "host:port", e.g. "localhost:9092"`)
		}
	}
	if cfg.embedded() && cfg.Engine.Dir != "" {
		return badConfig("Engine.Dir", "set with the embedded cluster, which lives in memory and is gone when Run returns: a cache kept on disk would outlive the state it caches",
			"leave Engine.Dir empty on the embedded cluster, or give Brokers")
	}
	return nil
}

func (cfg *Config[S]) checkHTTP() error {
	if cfg.HTTP != "" {
		if _, _, err := net.SplitHostPort(cfg.HTTP); err != nil {
			return badConfig("HTTP", fmt.Sprintf("%q is not host:port: %v", cfg.HTTP, err), `give a listen address such as ":8080"`)
		}
	}
	if cfg.Endpoint != "" && !strings.Contains(cfg.Endpoint, "://") {
		return badConfig("Endpoint", fmt.Sprintf("%q is not a URL", cfg.Endpoint), `give the URL other instances reach this one at, e.g. "http://10.0.0.5:8080"`)
	}
	return nil
}

func (cfg *Config[S]) checkEngine() error {
	e := &cfg.Engine
	set := func(field string) error {
		return badConfig("Engine."+field, "set; the service sets it", "leave it unset: the service builds it from its own configuration")
	}
	switch {
	case e.Store != nil:
		return set("Store")
	case e.Emit != nil:
		return set("Emit")
	case e.StartEmit != nil:
		return set("StartEmit")
	case e.CheckOutputTopics != nil:
		return set("CheckOutputTopics")
	case e.Observer != nil:
		return set("Observer")
	}
	return nil
}

// endpoint is Endpoint or its default, given the address the HTTP
// server listens on (nil for none).
func (cfg *Config[S]) endpoint(listening net.Addr) string {
	if cfg.Endpoint != "" || listening == nil {
		return cfg.Endpoint
	}
	host, _, _ := net.SplitHostPort(cfg.HTTP)
	_, port, _ := net.SplitHostPort(listening.String())
	if host == "" || host == "0.0.0.0" || host == "::" {
		if h, err := os.Hostname(); err == nil {
			host = h
		} else {
			host = "localhost"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// clientOpts are TLS, SASL and ClientOpts as franz-go options.
func (cfg *Config[S]) clientOpts() []kgo.Opt {
	var opts []kgo.Opt
	if cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg.TLS))
	}
	if cfg.SASL != nil {
		opts = append(opts, kgo.SASL(cfg.SASL))
	}
	return append(opts, cfg.ClientOpts...)
}
