// Package service runs a snapfence engine as a service from one
// configuration: the application's name, the brokers (or the embedded
// cluster), the input topic and the fold. It builds the snapshot store
// (store/kafka), the consumer and the output producer (engine/kafkaio),
// the lookup tables (engine/view) and the Prometheus metrics
// (engine/prom), and serves the health probes, the metrics and the
// queries by key over HTTP:
//
//	svc, err := service.New(ctx, service.Config[Total]{
//		Application: "order-totals",
//		Brokers:     []string{service.Embedded}, // or "localhost:9092"
//		Input:       "orders",
//		HTTP:        ":8080",
//		Engine:      engine.Config[Total]{Fold: fold, Codec: engine.JSON[Total]()},
//	})
//	...
//	err = svc.Run(ctx)
//
// The lower layers stay open to those who need them (engine.New with a
// store/kafka backend and a kafkaio.Config); a service needs none of
// them. Its fold is tested on the simulated cluster with the same
// engine.Config (package engine/enginetest).
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/kafkaio"
	"github.com/snapfence/snapfence/engine/prom"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// ErrRunning is what a second Run of a Service returns.
var ErrRunning = errors.New("service: Run called twice")

// Service is one instance of an application: an engine with its store,
// consumer, producer, tables and metrics, built by New and run by Run.
type Service[S any] struct {
	cfg      Config[S]
	endpoint string
	brokers  []string
	cluster  *kfake.Cluster // the embedded cluster, or nil
	backend  *kafka.Backend
	emitter  *kafkaio.Emitter // at least once only
	engine   *engine.Engine[S]
	tables   []table
	registry *prometheus.Registry
	handler  http.Handler
	server   *server // serving Config.HTTP, or nil

	mu      sync.Mutex
	ran     bool
	release func() error // closes what New opened, once
}

// New builds a service from cfg: it checks cfg, starts the embedded
// cluster if asked, creates the missing topics (CreateTopics), connects
// the store, the producer and the tables, and opens the engine's cache.
// It folds nothing until Run. A configuration that cannot work is a
// *store.ConfigError naming the field; on any error, whatever New opened
// is closed again.
func New[S any](ctx context.Context, cfg Config[S]) (_ *Service[S], err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Service[S]{cfg: cfg, brokers: cfg.Brokers, registry: cfg.Registry}
	var closers []func() error
	s.release = sync.OnceValue(func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	})
	defer func() {
		if err != nil {
			_ = s.release()
		}
	}()
	if cfg.HTTP != "" {
		// Listening here, not in Run, fails a taken port at New, and
		// lets ":0" advertise the port it got.
		if s.server, err = s.listen(); err != nil {
			return nil, err
		}
		closers = append(closers, func() error {
			if err := s.server.ln.Close(); !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil // the server's shutdown closed it
		})
	}
	s.endpoint = cfg.endpoint(s.server.addr())
	if cfg.embedded() {
		if err := s.startEmbedded(); err != nil {
			return nil, err
		}
		closers = append(closers, func() error { s.cluster.Close(); return nil })
	}
	if err := s.createTopics(ctx); err != nil {
		return nil, err
	}
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
	}
	metrics, err := prom.NewMetrics(s.registry)
	if err != nil {
		return nil, fmt.Errorf("service: registering the metrics: %w", err)
	}
	if s.backend, err = kafka.New(ctx, s.storeConfig(metrics)); err != nil {
		return nil, err
	}
	closers = append(closers, s.backend.Close)
	ecfg := cfg.Engine
	ecfg.Store, ecfg.Observer = s.backend, metrics
	if !ecfg.ExactlyOnce {
		if s.emitter, err = kafkaio.NewEmitter(s.emitterConfig()); err != nil {
			return nil, err
		}
		closers = append(closers, func() error { s.emitter.Close(); return nil })
		ecfg.StartEmit, ecfg.CheckOutputTopics = s.emitter.StartEmit, s.emitter.CheckTopics
	}
	if s.tables, err = openTables(ctx, ecfg.Tables, s.backend); err != nil {
		return nil, err
	}
	closers = append(closers, func() error { return closeTables(s.tables) })
	if s.engine, err = engine.New(ecfg); err != nil {
		return nil, err
	}
	closers = append(closers, s.engine.Close)
	s.handler = s.newHandler()
	if s.server != nil {
		s.server.srv.Handler = s.handler
	}
	return s, nil
}

// startEmbedded starts the in-process cluster the service runs on.
func (s *Service[S]) startEmbedded() error {
	if s.cfg.Partitions == 0 {
		s.cfg.Partitions = DefaultEmbeddedPartitions
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(int(s.cfg.Partitions)))
	if err != nil {
		return fmt.Errorf("service: starting the embedded cluster: %w", err)
	}
	s.cluster, s.brokers = c, c.ListenAddrs()
	s.cfg.CreateTopics = true
	s.logger().Info("embedded Kafka cluster started (in memory, gone when the service stops)", "brokers", s.brokers)
	return nil
}

// storeConfig is the snapshot store's configuration.
func (s *Service[S]) storeConfig(metrics *prom.Metrics) kafka.Config {
	cfg := s.cfg
	return kafka.Config{Mode: store.Transactional, SeedBrokers: s.brokers, Application: cfg.Application,
		CreateTopics: cfg.CreateTopics, CreateOutputTopics: cfg.CreateTopics && cfg.Engine.ExactlyOnce,
		OutputTopicPartitions: cfg.Partitions, TLS: cfg.TLS, SASL: cfg.SASL, ClientOpts: cfg.ClientOpts,
		Observer: metrics.StoreObserver(), Logger: cfg.Engine.Logger}
}

// emitterConfig is the at-least-once producer's configuration.
func (s *Service[S]) emitterConfig() kafkaio.EmitterConfig {
	return kafkaio.EmitterConfig{SeedBrokers: s.brokers, ClientOpts: s.cfg.clientOpts(),
		CreateTopics: s.cfg.CreateTopics, TopicPartitions: s.cfg.Partitions, Logger: s.cfg.Engine.Logger}
}

// inputConfig is the consumer's configuration.
func (s *Service[S]) inputConfig() kafkaio.Config {
	return kafkaio.Config{SeedBrokers: s.brokers, Group: s.cfg.Application, Topics: []string{s.cfg.Input},
		Endpoint: s.endpoint, LeaveOnClose: s.cfg.LeaveOnStop, ClientOpts: s.cfg.clientOpts()}
}

// Run runs the service until ctx ends or an error stops it: the HTTP
// server (Config.HTTP), the tables and the engine's member of the group.
// It returns nil when ctx ended it, or the error that stopped it (a
// *store.ConfigError for a misconfiguration it met, a *engine.FoldError
// for a poison record, ...). Everything New opened is closed when it
// returns, after the engine has left the group and its outputs are
// delivered. A Service runs once.
func (s *Service[S]) Run(ctx context.Context) (err error) {
	s.mu.Lock()
	if s.ran {
		s.mu.Unlock()
		return ErrRunning
	}
	s.ran = true
	s.mu.Unlock()
	defer func() { err = errors.Join(err, s.release()) }()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var failMu sync.Mutex
	var failed error // the first failure of the server or a table
	fail := func(err error) {
		failMu.Lock()
		defer failMu.Unlock()
		if failed == nil {
			failed = err
		}
		cancel()
	}
	if s.server != nil {
		wg.Go(func() {
			if err := s.server.serve(ctx); err != nil {
				fail(err)
			}
		})
	}
	for _, t := range s.tables {
		wg.Go(func() {
			if err := s.runTable(ctx, t); err != nil {
				fail(err)
			}
		})
	}
	err = s.engine.Run(ctx, s.inputConfig())
	failMu.Lock()
	defer failMu.Unlock()
	if failed != nil {
		return errors.Join(failed, err)
	}
	return err
}

// Close releases what New opened, for a Service that is not run (Run
// releases it itself when it returns).
func (s *Service[S]) Close() error {
	s.mu.Lock()
	ran := s.ran
	s.ran = true
	s.mu.Unlock()
	if ran {
		return nil
	}
	return s.release()
}

// Engine is the service's engine: its Status, Get, Range, Locate.
func (s *Service[S]) Engine() *engine.Engine[S] { return s.engine }

// Brokers are the seed brokers the service connects to: Config.Brokers,
// or the embedded cluster's listeners (to produce into it).
func (s *Service[S]) Brokers() []string { return append([]string(nil), s.brokers...) }

// Endpoint is the endpoint this instance advertises (Config.Endpoint, or
// its default).
func (s *Service[S]) Endpoint() string { return s.endpoint }

// Status is the engine's status (engine.Status).
func (s *Service[S]) Status() engine.Status { return s.engine.Status() }

func (s *Service[S]) logger() *slog.Logger {
	if s.cfg.Engine.Logger != nil {
		return s.cfg.Engine.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (s *Service[S]) warn(msg string, args ...any) { s.logger().Warn(msg, args...) }
