package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/snapfence/snapfence/internal/history"
	"github.com/snapfence/snapfence/internal/world"
	"github.com/snapfence/snapfence/internal/world/kfakeworld"
	"github.com/snapfence/snapfence/store"
)

// bridgeSpec is what the command asks of a world run in a test binary:
// the scenario (by name, or its steps), its protocol and the mode.
type bridgeSpec struct {
	Name     string       `json:"name,omitempty"` // a named scenario, or "" for Steps
	Steps    []world.Step `json:"steps,omitempty"`
	Protocol string       `json:"protocol"`
	Mode     string       `json:"mode"`
	Outputs  string       `json:"outputs,omitempty"` // at-least-once, exactly-once or "" (none)
}

// bridgeResult is what the world left.
type bridgeResult struct {
	Members    int               `json:"members"`
	Partitions int               `json:"partitions"`
	Ops        []history.Op      `json:"ops"`
	Violations []world.Violation `json:"violations"`
}

// bridgePackage is the package whose test binary runs the kfake world.
const bridgePackage = "github.com/snapfence/snapfence/cmd/simulate"

// kfakeBridge is the test binary that runs the kfake world, built once
// per invocation of the command (the Go toolchain's cache makes a build
// of unchanged source quick) and run once per scenario and mode.
type kfakeBridge struct {
	dir    string // the binary's temporary directory, removed by close
	binary string
	err    error
}

// path builds the binary the first time it is asked for.
func (b *kfakeBridge) path(ctx context.Context) (string, error) {
	if b.binary != "" || b.err != nil {
		return b.binary, b.err
	}
	dir, err := os.MkdirTemp("", "simulate-kfake-")
	if err != nil {
		b.err = err
		return "", err
	}
	b.dir = dir
	bin := filepath.Join(dir, "kfakeworld.test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, bridgePackage)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		b.err = fmt.Errorf("-world kfake runs the kfake world in a test binary (virtual time needs testing/synctest), built with `go test -c %s` from the snapfence source tree; the build failed: %v\n%s",
			bridgePackage, err, strings.TrimSpace(out.String()))
		return "", b.err
	}
	b.binary = bin
	return bin, nil
}

// close removes the binary.
func (b *kfakeBridge) close() {
	if b != nil && b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// runKfake runs s in mode on kfake with the real franz-go clients. The
// kfake world runs in virtual time, inside a testing/synctest bubble,
// which only a test binary has: the command builds this package's test
// binary once (so it needs the Go toolchain and the snapfence source, as
// `go run ./cmd/simulate` does) and runs its TestKfakeWorld for each
// scenario and mode, handing it the scenario in a file and reading back
// the history.
func runKfake(ctx context.Context, o options, s world.Scenario, mode store.Mode, outputs string) (run, error) {
	bin, err := o.bridge.path(ctx)
	if err != nil {
		return run{}, err
	}
	dir, err := os.MkdirTemp("", "simulate-kfake-run-")
	if err != nil {
		return run{}, err
	}
	defer os.RemoveAll(dir)
	spec := bridgeSpec{Protocol: protocolName(protocolOf(s)), Mode: modeName(mode), Outputs: outputs}
	if _, named := world.ScenarioNamed(s.Name); named {
		spec.Name = s.Name
	} else {
		spec.Steps = s.Steps
	}
	raw, _ := json.Marshal(spec)
	in, out := filepath.Join(dir, "spec.json"), filepath.Join(dir, "result.json")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		return run{}, err
	}
	cmd := exec.CommandContext(ctx, bin, "-test.count=1", "-test.run", "^TestKfakeWorld$",
		"-simulate.spec="+in, "-simulate.out="+out)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		if _, statErr := os.Stat(out); statErr != nil {
			return run{}, fmt.Errorf("-world kfake: the kfake world's test binary failed: %v\n%s", err, strings.TrimSpace(stderr.String()))
		}
		// The world ran; its verdict is ours to give.
	}
	raw, err = os.ReadFile(out)
	if err != nil {
		return run{}, err
	}
	var res bridgeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return run{}, fmt.Errorf("-world kfake: reading the world's history: %w", err)
	}
	return finish(s, mode, outputs, res.Members, res.Partitions, res.Ops, res.Violations), nil
}

// kafkaName names a -world kafka run's topics, group and
// transactional.ids (after "snapfence-simulate-"): the mode and the time.
// A variable, so that the integration test knows the names.
var kafkaName = func(mode store.Mode) string {
	return fmt.Sprintf("%s-%d", modeName(mode), time.Now().UnixNano())
}

// runKafka runs s in mode on a real broker: the kfake world in its
// real-broker mode (kfakeworld.Config.Brokers), in real time, in this
// process, on topics, a group and a transactional.id prefix of its own,
// deleted when it ends. A world that cannot be set up (the brokers
// unreachable, a topic refused, the broker's group or transaction
// settings out of the world's bounds) is an error; so is one that fails
// while it runs (the world panics on what it cannot go on from).
func runKafka(ctx context.Context, o options, s world.Scenario, mode store.Mode, outputs string) (r run, err error) {
	tlsCfg, mech, err := o.kafka.security()
	if err != nil {
		return run{}, err
	}
	cfg := kfakeworld.Config{Mode: mode, Protocol: s.Protocol, Brokers: o.kafka.seeds(), TLS: tlsCfg, SASL: mech, Name: kafkaName(mode)}
	cfg.ExactlyOnce, cfg.ProduceOutputs = outputFlags(outputs)
	if o.verbose {
		cfg.Logf = func(format string, args ...any) { fmt.Fprintf(o.stderr, "simulate: kafka: "+format+"\n", args...) }
	}
	w, err := kfakeworld.New(cfg)
	if err != nil {
		return run{}, fmt.Errorf("-world kafka: %w", err)
	}
	defer func() {
		// A world that failed is closed too (its topics deleted); a
		// failure of the close itself is reported unless one came first.
		if p := recover(); p != nil && err == nil {
			err = fmt.Errorf("-world kafka: %v", p)
		}
	}()
	defer w.Close()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("-world kafka: %v", p)
		}
	}()
	var vs []world.Violation
	for _, st := range s.Steps {
		if err := ctx.Err(); err != nil {
			return run{}, fmt.Errorf("-world kafka: %w", err)
		}
		vs = append(vs, w.Apply(st)...)
	}
	vs = append(vs, w.Quiesce()...)
	return finish(s, mode, outputs, w.Config().StepConfig().Members, kfakeworld.Partitions, w.History().Ops(), vs), nil
}
