// Package kafkatest gives integration tests a real Apache Kafka broker.
//
// Integration tests carry the build tag `it` and run under `make it`, which
// starts one single-node broker (it/kafka/broker) for the whole run and
// passes its bootstrap address in the environment variable
// SNAPFENCE_KAFKA_BROKERS; a test gets it from [Brokers]. A test that needs
// a broker of its own (to stop or restart it) starts one with [Start].
package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvBrokers names the environment variable that holds the shared broker's
// bootstrap addresses, comma-separated.
const EnvBrokers = "SNAPFENCE_KAFKA_BROKERS"

// Available reports whether a shared broker was started for this run
// (EnvBrokers is set).
func Available() bool {
	return os.Getenv(EnvBrokers) != ""
}

// Brokers returns the shared broker's bootstrap addresses. It fails the
// test when there is none: integration tests run under `make it`.
func Brokers(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(EnvBrokers)
	if v == "" {
		t.Fatalf("kafkatest: %s is not set: integration tests need a Kafka broker; run them with `make it`", EnvBrokers)
	}
	return strings.Split(v, ",")
}

// Broker is a broker started by [Start].
type Broker struct {
	// Addr is the bootstrap address, host:port on 127.0.0.1.
	Addr string
	// Dir holds the broker's config, data and logs (logs/server.log).
	Dir string

	script string
}

// Start starts a single-node broker in dir, which must be empty or
// missing, and returns once it accepts connections (the script bounds the
// wait). Stop it with [Broker.Stop]. Cancelling ctx stops a start in
// progress.
func Start(ctx context.Context, dir string) (*Broker, error) {
	script, err := script()
	if err != nil {
		return nil, err
	}
	out, err := run(ctx, script, "start", dir)
	if err != nil {
		// A start cut short may have left the broker running.
		_, _ = run(context.Background(), script, "stop", dir)
		return nil, err
	}
	return &Broker{Addr: strings.TrimSpace(out), Dir: dir, script: script}, nil
}

// Stop stops the broker (SIGTERM, then SIGKILL after a grace period) and
// returns once it has exited. Stopping a stopped broker does nothing.
func (b *Broker) Stop() error {
	_, err := run(context.Background(), b.script, "stop", b.Dir)
	return err
}

// Restart starts the stopped broker again on its own ports and data
// directory (which a test may have edited while it was down), and returns
// once it accepts connections.
func (b *Broker) Restart(ctx context.Context) error {
	_, err := run(ctx, b.script, "restart", b.Dir)
	return err
}

// run runs the broker script and returns its standard output.
func run(ctx context.Context, script string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// The broker itself writes to files; don't wait long on a killed
	// script's children for the pipes to close.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kafkatest: %s %s: %w\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// script finds it/kafka/broker in the enclosing module (go test runs a
// package's tests in its directory).
func script() (string, error) {
	return scriptNamed("broker")
}

// scriptNamed finds it/kafka/NAME in the enclosing module.
func scriptNamed(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "it", "kafka", name)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("kafkatest: no %s script: %w", name, err)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kafkatest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// RunTool runs one of Kafka's command-line tools (a main class on the
// broker's classpath, e.g. org.apache.kafka.tools.TransactionsCommand) with
// args, and returns its standard output.
func RunTool(ctx context.Context, class string, args ...string) (string, error) {
	s, err := script()
	if err != nil {
		return "", err
	}
	cpFile := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(s))), ".cache", "kafka", "classpath")
	cp, err := os.ReadFile(cpFile)
	if err != nil {
		return "", fmt.Errorf("kafkatest: the broker's classpath (run `it/kafka/broker classpath`): %w", err)
	}
	cmd := exec.CommandContext(ctx, "java", append([]string{"-cp", strings.TrimSpace(string(cp)), class}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kafkatest: %s %v: %w: %s", class, args, err, stderr.String())
	}
	return stdout.String(), nil
}
