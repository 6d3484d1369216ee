package kafkatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvCluster names the environment variable that holds the directory of
// the replicated cluster a run was given (`it/kafka/cluster run`, as
// `make it-cluster` does); SNAPFENCE_KAFKA_BROKERS then holds its
// bootstrap list.
const EnvCluster = "SNAPFENCE_KAFKA_CLUSTER"

// Cluster is a replicated cluster started by it/kafka/cluster: nodes
// 0 to N-1, each broker and controller, node I with node.id I. Its
// methods run the script on the cluster's directory.
type Cluster struct {
	// Dir is the cluster's directory (DIR/nodeI/logs/server.log: node
	// I's log).
	Dir string
	// Brokers is the bootstrap list, every node's host:port.
	Brokers []string
	// Nodes is the node count.
	Nodes int

	script string
}

// ClusterFromEnv returns the cluster named by EnvCluster. It skips the
// test when EnvCluster is unset: a chaos test runs under `make
// it-cluster`.
func ClusterFromEnv(t testing.TB) *Cluster {
	t.Helper()
	dir := os.Getenv(EnvCluster)
	if dir == "" {
		t.Skipf("kafkatest: %s is not set: this test needs a replicated cluster; run it with `make it-cluster`", EnvCluster)
	}
	c, err := OpenCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// OpenCluster returns the cluster that it/kafka/cluster started in dir.
func OpenCluster(dir string) (*Cluster, error) {
	s, err := scriptNamed("cluster")
	if err != nil {
		return nil, err
	}
	n, err := os.ReadFile(filepath.Join(dir, "nodes"))
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %s holds no cluster: %w", dir, err)
	}
	nodes, err := strconv.Atoi(strings.TrimSpace(string(n)))
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %s/nodes: %w", dir, err)
	}
	addr, err := os.ReadFile(filepath.Join(dir, "address"))
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %s holds no cluster: %w", dir, err)
	}
	return &Cluster{
		Dir:     dir,
		Brokers: strings.Split(strings.TrimSpace(string(addr)), ","),
		Nodes:   nodes,
		script:  s,
	}, nil
}

func (c *Cluster) run(ctx context.Context, args ...string) (string, error) {
	return run(ctx, c.script, append([]string{args[0], c.Dir}, args[1:]...)...)
}

// KillNode SIGKILLs node i and returns once its process is gone.
func (c *Cluster) KillNode(ctx context.Context, i int) error {
	_, err := c.run(ctx, "kill-node", strconv.Itoa(i))
	return err
}

// StopNode stops node i cleanly (SIGTERM, SIGKILL after a grace period).
func (c *Cluster) StopNode(ctx context.Context, i int) error {
	_, err := c.run(ctx, "stop-node", strconv.Itoa(i))
	return err
}

// RestartNode starts the stopped node i again on its own ports and data,
// and returns once it serves (not once it caught up: [Cluster.WaitHealthy]).
func (c *Cluster) RestartNode(ctx context.Context, i int) error {
	_, err := c.run(ctx, "restart-node", strconv.Itoa(i))
	return err
}

// PauseNode stops node i's process with SIGSTOP; ResumeNode continues it.
func (c *Cluster) PauseNode(ctx context.Context, i int) error {
	_, err := c.run(ctx, "pause-node", strconv.Itoa(i))
	return err
}

// ResumeNode continues node i after [Cluster.PauseNode].
func (c *Cluster) ResumeNode(ctx context.Context, i int) error {
	_, err := c.run(ctx, "resume-node", strconv.Itoa(i))
	return err
}

// WaitHealthy returns once every node runs, the quorum has every voter
// caught up, every broker is unfenced and no partition is under-replicated
// or offline; it fails after timeout naming what is still unhealthy.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	_, err := c.run(ctx, "wait-healthy", strconv.Itoa(int(timeout.Seconds())))
	return err
}

// Leaders is what `it/kafka/cluster leaders` reports.
type Leaders struct {
	// Controller is the node index of the active controller.
	Controller int
	// Partitions maps "topic/partition" to its leader's node index, -1
	// for none (offline).
	Partitions map[string]int
}

// Leaders returns the active controller and the leader of every
// partition of topics (none given: __consumer_offsets and
// __transaction_state).
func (c *Cluster) Leaders(ctx context.Context, topics ...string) (Leaders, error) {
	out, err := c.run(ctx, append([]string{"leaders"}, topics...)...)
	if err != nil {
		return Leaders{}, err
	}
	l := Leaders{Controller: -1, Partitions: map[string]int{}}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "controller":
			if l.Controller, err = strconv.Atoi(f[1]); err != nil {
				return Leaders{}, fmt.Errorf("kafkatest: leaders: %q: %w", line, err)
			}
		case len(f) == 3:
			leader := -1
			if f[2] != "none" {
				if leader, err = strconv.Atoi(f[2]); err != nil {
					return Leaders{}, fmt.Errorf("kafkatest: leaders: %q: %w", line, err)
				}
			}
			l.Partitions[f[0]+"/"+f[1]] = leader
		case len(f) == 0:
		default:
			return Leaders{}, fmt.Errorf("kafkatest: leaders: unexpected line %q", line)
		}
	}
	if l.Controller < 0 {
		return Leaders{}, fmt.Errorf("kafkatest: leaders named no controller:\n%s", out)
	}
	return l, nil
}
