//go:build it

package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/snapfence/snapfence/engine/kafkaio"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/internal/kafkatest"
	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/kafka"
)

// The engine on a secured cluster (`make it-secure`: TLS, SASL/SCRAM-SHA-512,
// the StandardAuthorizer): principal app with exactly the minimum ACLs of
// docs/operations.md ("ACLs"), each of them missing in turn, and a
// principal without ACLs.

// securedWorld is a fresh input topic (two partitions), snapshot topic
// and output topics on the secured cluster, made by admin.
type securedWorld struct {
	t     *testing.T
	s     *kafkatest.Secured
	admin *kgo.Client
	adm   *kadm.Client
	topic string
	want  ledger
}

func newSecuredWorld(t *testing.T) *securedWorld {
	s := kafkatest.SecuredFromEnv(t)
	w := &securedWorld{t: t, s: s, want: ledger{}, topic: fmt.Sprintf("secured-%d", time.Now().UnixNano())}
	w.admin, w.adm = s.Admin(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	compact := "compact"
	ctx := context.Background()
	for _, tp := range []struct {
		name string
		cfg  map[string]*string
	}{{w.topic, nil}, {w.snapshots(), map[string]*string{"cleanup.policy": &compact}}, {w.audit(), nil}, {w.balances(), nil}} {
		if err := kafka.CreateTopic(ctx, w.admin, tp.name, 2, -1, tp.cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		w.adm.DeleteTopics(context.Background(), w.topic, w.snapshots(), w.audit(), w.balances())
		w.adm.DeleteACLs(context.Background(), kadm.NewACLs().Allow("User:app").AllowHosts().
			AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny))
	})
	return w
}

func (w *securedWorld) snapshots() string { return kafka.DefaultSnapshotTopic(w.topic, w.topic) }
func (w *securedWorld) audit() string     { return w.topic + "-audit" }
func (w *securedWorld) balances() string  { return w.topic + "-balances" }
func (w *securedWorld) group() string     { return w.topic + "-group" }

// txnPrefix is the transactional.id prefix the engine's store uses, with
// the separator its ids add: the PREFIXED ACL's name.
func (w *securedWorld) txnPrefix() string { return w.topic + "-" }

// minimumACLs is docs/operations.md's minimum list for principal app.
func (w *securedWorld) minimumACLs() []kafkatest.ACL {
	topic, group, txn := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId
	return []kafkatest.ACL{
		{Resource: topic, Name: w.topic, Op: kmsg.ACLOperationRead},
		{Resource: group, Name: w.group(), Op: kmsg.ACLOperationRead},
		{Resource: txn, Name: w.txnPrefix(), Pattern: kmsg.ACLResourcePatternTypePrefixed, Op: kmsg.ACLOperationWrite},
		{Resource: topic, Name: w.snapshots(), Op: kmsg.ACLOperationRead},
		{Resource: topic, Name: w.snapshots(), Op: kmsg.ACLOperationWrite},
		{Resource: topic, Name: w.snapshots(), Op: kmsg.ACLOperationDescribeConfigs},
		{Resource: topic, Name: w.audit(), Op: kmsg.ACLOperationWrite},
		{Resource: topic, Name: w.balances(), Op: kmsg.ACLOperationWrite},
	}
}

func (w *securedWorld) grant(acls ...kafkatest.ACL) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkatest.Grant(ctx, w.admin, "User:app", acls...); err != nil {
		w.t.Fatal(err)
	}
}

func (w *securedWorld) revoke(acls ...kafkatest.ACL) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkatest.Revoke(ctx, w.admin, "User:app", acls...); err != nil {
		w.t.Fatal(err)
	}
}

// commitAll runs an engine until the group committed the input to its
// end, and closes it.
func (w *securedWorld) commitAll(exactlyOnce bool) {
	w.t.Helper()
	logs := &logCount{}
	r := w.runner(exactlyOnce, logs)
	w.stepUntilCommitted(r, logs)
	if err := r.Close(context.Background()); err != nil {
		w.t.Fatal(err)
	}
}

// stepUntilCommitted steps r until the group committed the input to its
// end with both partitions flowing (observed, bounded by a minute).
func (w *securedWorld) stepUntilCommitted(r *engine.Member[int], logs *logCount) {
	t := w.t
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !w.caughtUp() || len(r.Flows()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not committed to the end of the input in a minute; errors: %v\nlog:\n%s", r.Errors(), logs)
		}
		if err := r.Step(context.Background()); err != nil {
			t.Fatalf("Step: %v\nlog:\n%s", err, logs)
		}
	}
}

func (w *securedWorld) produce(events ...string) {
	w.t.Helper()
	for _, ev := range events {
		k, v, _ := strings.Cut(ev, "=")
		r := &kgo.Record{Topic: w.topic, Partition: int32(len(k) % 2), Key: []byte(k), Value: []byte(v)}
		if err := w.admin.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			w.t.Fatal(err)
		}
		w.want.apply(k, v)
	}
}

// runner is an engine of principal app (TLS and SASL on every client:
// the store's, the consumer's and the emitter's), exactly once or with the
// at-least-once emitter, logging into logs.
func (w *securedWorld) runner(exactlyOnce bool, logs *logCount) *engine.Member[int] {
	w.t.Helper()
	r, err := w.newRunner(exactlyOnce, logs)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// newRunner is runner with Join's error returned (its input-topic
// check meets the ACLs of the input topic).
func (w *securedWorld) newRunner(exactlyOnce bool, logs *logCount) (*engine.Member[int], error) {
	t := w.t
	t.Helper()
	b, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: w.s.Brokers,
		TransactionalIDPrefix: w.topic, TLS: w.s.TLS(), SASL: w.s.SASL(t, "app")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if got := b.TransactionalID(store.TopicPartition{Topic: w.topic, Partition: 0}); !strings.HasPrefix(got, w.txnPrefix()) {
		t.Fatalf("transactional.id %q does not start with the ACL's prefix %q", got, w.txnPrefix())
	}
	auth := []kgo.Opt{kgo.DialTLSConfig(w.s.TLS()), kgo.SASL(w.s.SASL(t, "app"))}
	cfg := engine.Config[int]{Fold: auditedTo(w.audit(), w.balances()), Codec: intCodec{}, Store: b, Dir: t.TempDir(),
		PersistInterval: 200 * time.Millisecond, CommitInterval: 400 * time.Millisecond, Logger: slog.New(logs)}
	if exactlyOnce {
		cfg.ExactlyOnce, cfg.OutputTopics = true, []string{w.audit(), w.balances()}
	} else {
		em, err := kafkaio.NewEmitter(kafkaio.EmitterConfig{SeedBrokers: w.s.Brokers, ClientOpts: auth})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = em.Close() })
		cfg.Emit = em.Emit
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.CloseAbandoning(e) })
	r, err := e.Join(kafkaio.Config{
		SeedBrokers: w.s.Brokers, Group: w.group(), Topics: []string{w.topic},
		ClientOpts: append(auth, kgo.SessionTimeout(6*time.Second)),
	})
	return r, err
}

// caughtUp: the group committed both input partitions to their ends.
func (w *securedWorld) caughtUp() bool {
	for p := range int32(2) {
		tp := store.TopicPartition{Topic: w.topic, Partition: p}
		if committedOffset(w.t, w.adm, w.group(), tp) != endOffset(w.t, w.adm, tp) {
			return false
		}
	}
	return true
}

// outputs counts the committed records of topic (read_committed, as
// admin).
func (w *securedWorld) outputs(topic string) int64 {
	w.t.Helper()
	ends, err := w.adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		w.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// noPasswords fails if any user's password appears in the logs (which
// must hold something) or in texts (an error's, say).
func (w *securedWorld) noPasswords(logs *logCount, texts ...string) {
	w.t.Helper()
	out := logs.String()
	if out == "" && len(texts) == 0 {
		w.t.Fatal("the engine logged nothing: the password check would be vacuous")
	}
	for _, u := range []string{"admin", "app", "intruder"} {
		for _, text := range append(texts, out) {
			if strings.Contains(text, w.s.Password(w.t, u)) {
				w.t.Fatalf("the password of %s appears in the engine's log or error", u)
			}
		}
	}
}

// With exactly the minimum ACLs the engine folds, emits and commits, in
// both output modes; its log holds no password.
func TestSecuredMinimumACLs(t *testing.T) {
	for name, eos := range map[string]bool{"at-least-once": false, "exactly-once": true} {
		t.Run(name, func(t *testing.T) {
			w := newSecuredWorld(t)
			w.grant(w.minimumACLs()...)
			w.produce("alice=+5", "bob=+3", "alice=-2", "carol=+7", "bob=close", "dave=+1")
			logs := &logCount{}
			r := w.runner(eos, logs)
			w.stepUntilCommitted(r, logs)
			checkLedger(t, w.want, w.topic, r)
			// Every input has its audit record; the balances topic one per
			// non-delete (bob=close outputs nothing). Under at-least-once
			// the emitter delivered them before the commit.
			if got := w.outputs(w.audit()); got < 6 {
				t.Fatalf("%d audit outputs, want at least 6", got)
			}
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			w.noPasswords(logs)
		})
	}
}

// With each ACL of the minimum list missing in turn, Run ends within a
// bound with an error that names the refused operation's resource and
// the ACL to grant, not a retry loop; the log holds no password.
func TestSecuredMissingACL(t *testing.T) {
	probe := &securedWorld{topic: "T"}
	for i, missing := range probe.minimumACLs() {
		for name, eos := range map[string]bool{"at-least-once": false, "exactly-once": true} {
			t.Run(fmt.Sprintf("%d-%s/%s", i, strings.ReplaceAll(missing.String(), " ", "_"), name), func(t *testing.T) {
				w := newSecuredWorld(t)
				acls := w.minimumACLs()
				gone := acls[i]
				if gone.Resource == kmsg.ACLResourceTypeTopic && gone.Name == w.snapshots() && gone.Op == kmsg.ACLOperationRead {
					// READ on the snapshot topic is needed only to recover
					// snapshots: with none, an engine runs without it. So
					// an engine with every ACL commits snapshots first; the
					// one under test recovers them (a fresh Dir: in full).
					w.grant(acls...)
					w.produce("alice=+5", "dave=+2")
					w.commitAll(eos)
					w.revoke(gone)
				} else {
					w.grant(append(acls[:i:i], acls[i+1:]...)...)
					w.produce("alice=+5", "dave=+2")
				}
				logs := &logCount{}
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				begin := time.Now()
				r, err := w.newRunner(eos, logs)
				if err == nil {
					err = r.Run(ctx)
					if ctx.Err() != nil {
						t.Fatalf("without %s, Run did not return within 90s (returned %v); errors: %v\nlog:\n%s", gone, err, r.Errors(), logs)
					}
				}
				t.Logf("without %s, Run returned after %v: %v", gone, time.Since(begin).Round(time.Millisecond), err)
				if err == nil {
					t.Fatalf("without %s, Run returned nil", gone)
				}
				if !errors.Is(err, store.ErrMisconfigured) {
					t.Errorf("without %s, Run's error does not match store.ErrMisconfigured: %v", gone, err)
				}
				if !errors.Is(err, authErr(gone)) {
					t.Errorf("without %s, Run's error does not match %v: %v", gone, authErr(gone), err)
				}
				var ce *store.ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("without %s, Run's error is not a *store.ConfigError: %v", gone, err)
				}
				// The subject is the refused resource alone, not a set it
				// is among.
				for _, other := range []string{w.topic, w.snapshots(), w.audit(), w.balances()} {
					if other != gone.Name && strings.Contains(ce.Subject, fmt.Sprintf("%q", other)) {
						t.Errorf("without %s, Run's error's subject names %q too: %v", gone, other, err)
					}
				}
				msg := err.Error()
				if !strings.Contains(msg, gone.Name) {
					t.Errorf("without %s, Run's error does not name %q: %v", gone, gone.Name, err)
				}
				if !strings.Contains(msg, gone.Op.String()) {
					t.Errorf("without %s, Run's error does not name the operation %s: %v", gone, gone.Op, err)
				}
				w.noPasswords(logs, msg)
			})
		}
	}
}

// authErr is the Kafka error a missing ACL on a's resource gives.
func authErr(a kafkatest.ACL) error {
	switch a.Resource {
	case kmsg.ACLResourceTypeGroup:
		return kerr.GroupAuthorizationFailed
	case kmsg.ACLResourceTypeTransactionalId:
		return kerr.TransactionalIDAuthorizationFailed
	default:
		return kerr.TopicAuthorizationFailed
	}
}

// A principal without ACLs can neither write the app's snapshot topic nor
// take over its transactional ids, while app runs with the minimum.
func TestSecuredIntruder(t *testing.T) {
	w := newSecuredWorld(t)
	w.grant(w.minimumACLs()...)
	w.produce("alice=+5", "dave=+2")
	logs := &logCount{}
	r := w.runner(true, logs)
	w.stepUntilCommitted(r, logs)
	for p := range int32(2) {
		id := txnIDOf(t, w, store.TopicPartition{Topic: w.topic, Partition: p})
		cl, err := kgo.NewClient(append(w.s.ClientOpts(t, "intruder"), kgo.TransactionalID(id),
			kgo.DefaultProduceTopic(w.snapshots()), kgo.RecordRetries(2))...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = cl.BeginTransaction()
		if err == nil {
			err = cl.ProduceSync(ctx, &kgo.Record{Key: []byte("alice"), Value: []byte("999")}).FirstErr()
		}
		cancel()
		cl.Close()
		if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Errorf("intruder with transactional.id %q: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", id, err)
		}
	}
	// Without a transactional id: the write to the snapshot topic itself.
	cl, err := kgo.NewClient(append(w.s.ClientOpts(t, "intruder"), kgo.DefaultProduceTopic(w.snapshots()),
		kgo.DisableIdempotentWrite(), kgo.RecordRetries(2))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Key: []byte("alice"), Value: []byte("999")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("intruder producing to %s: %v, want TOPIC_AUTHORIZATION_FAILED", w.snapshots(), err)
	}
	// The app still owns its partitions and commits.
	w.produce("alice=+1", "dave=+1")
	deadline := time.Now().Add(time.Minute)
	for !w.caughtUp() {
		if time.Now().After(deadline) {
			t.Fatalf("app did not commit after the intruder's attempts; errors: %v", r.Errors())
		}
		if err := r.Step(context.Background()); err != nil {
			t.Fatalf("app after the intruder's attempts: %v", err)
		}
	}
	checkLedger(t, w.want, w.topic, r)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.noPasswords(logs)
}

func txnIDOf(t *testing.T, w *securedWorld, in store.TopicPartition) string {
	b, err := kafka.New(context.Background(), kafka.Config{Mode: store.Transactional, SeedBrokers: w.s.Brokers,
		TransactionalIDPrefix: w.topic, TLS: w.s.TLS(), SASL: w.s.SASL(t, "app")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	return b.TransactionalID(in)
}
