//go:build it

package engine_test

// The Kafka Streams peer of BenchmarkLimit and BenchmarkLatency: the
// it/kstreams app (SumApp), run as a subprocess by it/kstreams/app.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// streamsStopWait bounds the app's exit after its stdin's end (a clean
// close of Kafka Streams: its threads, a last commit); then it is killed.
const streamsStopWait = 90 * time.Second

// streamsApp is it/kstreams/app: the engine package's directory is the
// working directory of its tests, and the repository's root its parent.
func streamsApp() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(wd), "it", "kstreams", "app"), nil
}

// buildStreamsApp builds the app once per test process (mvn, the first
// time on a machine: Kafka Streams from Maven Central), before an op, so
// that no op's start includes the build.
var buildStreamsApp = sync.OnceValue(func() error {
	app, err := streamsApp()
	if err != nil {
		return err
	}
	out, err := exec.Command(app, "build").CombinedOutput()
	if err != nil {
		return fmt.Errorf("it/kstreams/app build: %v\n%s", err, out)
	}
	return nil
})

// startStreams runs the app on the op's topics, at_least_once with the
// op's commit interval or exactly_once_v2 (eos) with 100 ms, until
// stopped: stop closes its stdin (the app closes Kafka Streams and exits)
// and returns an error if it did not exit 0. The app's stdout lines drive
// the op: "first" (its first input processed) begins the measured part,
// "consumed" (the backlog's last input processed) and "commit" (a stream
// thread committed) wake awaitCommitted. Its stderr (Kafka Streams'
// warnings and errors) is kept, the end of it, for the errors.
func (lr *limitRun) startStreams(eos bool) func() error {
	b := lr.b
	app, err := streamsApp()
	if err != nil {
		b.Fatal(err)
	}
	stateDir, err := os.MkdirTemp("", "snapfence-kstreams-")
	if err != nil {
		b.Fatal(err)
	}
	guarantee := "at_least_once"
	if eos {
		guarantee = "exactly_once_v2"
	}
	args := []string{"run", "--bootstrap", strings.Join(lr.brokers, ","), "--input", lr.input, "--output", lr.output,
		"--application-id", lr.group, "--guarantee", guarantee, "--commit-interval-ms", strconv.FormatInt(lr.interval.Milliseconds(), 10),
		"--state-dir", stateDir, "--threads", strconv.Itoa(*kstreamsThreads)}
	if lr.records > 0 {
		args = append(args, "--expect", strconv.FormatInt(lr.records, 10))
	}
	// ctx ends with stop, after the grace period: it kills the app. The
	// app also exits by itself at its stdin's end, should this process
	// die first.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, app, args...)
	cmd.WaitDelay = 10 * time.Second
	stderr := &tailBuffer{max: 16 << 10}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		_ = os.RemoveAll(stateDir)
		b.Fatal(err)
	}
	lr.peerPID = cmd.Process.Pid // `app run` execs java

	var stopping atomic.Bool
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			switch sc.Text() {
			case "first":
				lr.begin()
				// The app's commits, not its inputs, are what
				// awaitCommitted waits for: it reads the committed
				// offsets from the start (at each nudge).
				lr.consumed.Store(max(lr.records, 0))
				lr.nudge()
			case "consumed":
				lr.consumedAt.CompareAndSwap(0, time.Now().UnixNano())
				lr.nudge()
			case "commit":
				lr.nudge()
			}
		}
		err := cmd.Wait()
		if err == nil && !stopping.Load() {
			err = errors.New("exited before it was stopped")
		}
		if err != nil {
			err = fmt.Errorf("kafka streams (it/kstreams/app): %w; its stderr ends:\n%s", err, stderr)
			if !stopping.Load() {
				lr.failed(err)
			}
		}
		done <- err
	}()
	return func() error {
		stopping.Store(true)
		_ = stdin.Close()
		var err error
		select {
		case err = <-done:
		case <-time.After(streamsStopWait):
			cancel()
			err = errors.Join(fmt.Errorf("kafka streams did not exit within %v of its stdin's end: killed", streamsStopWait), <-done)
		}
		cancel()
		return errors.Join(err, os.RemoveAll(stateDir))
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
