package kafkatest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The environment of a secured cluster (SNAPFENCE_KAFKA_SECURE=1
// it/kafka/cluster run, as `make it-secure` does): the CA certificate
// clients trust, and the directory holding one password file per SCRAM
// user (admin, app, intruder).
const (
	EnvCA      = "SNAPFENCE_KAFKA_CA"
	EnvSASLDir = "SNAPFENCE_KAFKA_SASL_DIR"
)

// Secured is a secured cluster started by it/kafka/cluster: SASL_SSL with
// SCRAM-SHA-512 on the bootstrap list, the StandardAuthorizer, admin a
// super user.
type Secured struct {
	Brokers []string
	roots   *x509.CertPool
	saslDir string
}

// SecuredFromEnv returns the secured cluster of the run, or skips the
// test when there is none.
func SecuredFromEnv(t testing.TB) *Secured {
	t.Helper()
	ca, dir, brokers := os.Getenv(EnvCA), os.Getenv(EnvSASLDir), os.Getenv(EnvBrokers)
	if ca == "" || dir == "" || brokers == "" {
		t.Skipf("kafkatest: %s, %s or %s is not set: this test needs a secured cluster (TLS, SASL/SCRAM, ACLs); run it with `make it-secure`", EnvCA, EnvSASLDir, EnvBrokers)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatalf("kafkatest: the secured cluster's CA: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("kafkatest: %s holds no PEM certificate", ca)
	}
	return &Secured{Brokers: strings.Split(brokers, ","), roots: roots, saslDir: dir}
}

// TLS returns a fresh client TLS configuration that trusts the cluster's
// CA (and verifies the brokers' certificates: 127.0.0.1 is in them).
func (s *Secured) TLS() *tls.Config {
	return &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
}

// Password returns user's SCRAM password.
func (s *Secured) Password(t testing.TB, user string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.saslDir, user))
	if err != nil {
		t.Fatalf("kafkatest: the password of %s: %v", user, err)
	}
	return strings.TrimSpace(string(b))
}

// SASL returns the SCRAM-SHA-512 mechanism of user.
func (s *Secured) SASL(t testing.TB, user string) sasl.Mechanism {
	t.Helper()
	return scram.Auth{User: user, Pass: s.Password(t, user)}.AsSha512Mechanism()
}

// ClientOpts returns the options of a client authenticated as user:
// the seed brokers, TLS and SASL.
func (s *Secured) ClientOpts(t testing.TB, user string) []kgo.Opt {
	t.Helper()
	return []kgo.Opt{kgo.SeedBrokers(s.Brokers...), kgo.DialTLSConfig(s.TLS()), kgo.SASL(s.SASL(t, user))}
}

// Admin returns a client authenticated as admin (a super user), closed
// with the test.
func (s *Secured) Admin(t testing.TB, opts ...kgo.Opt) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(append(s.ClientOpts(t, "admin"), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

// ACL is one allow rule for a principal from any host.
type ACL struct {
	Resource kmsg.ACLResourceType
	Name     string
	Pattern  kmsg.ACLResourcePatternType // 0: LITERAL
	Op       kmsg.ACLOperation
}

func (a ACL) pattern() kmsg.ACLResourcePatternType {
	if a.Pattern == 0 {
		return kmsg.ACLResourcePatternTypeLiteral
	}
	return a.Pattern
}

// String reads as kafka-acls.sh would list it: "WRITE on TOPIC x
// (LITERAL)".
func (a ACL) String() string {
	return fmt.Sprintf("%s on %s %s (%s)", a.Op, a.Resource, a.Name, a.pattern())
}

func (a ACL) builder(principal string) *kadm.ACLBuilder {
	b := kadm.NewACLs().Allow(principal).Operations(a.Op).ResourcePatternType(a.pattern())
	switch a.Resource {
	case kmsg.ACLResourceTypeTopic:
		b.Topics(a.Name)
	case kmsg.ACLResourceTypeGroup:
		b.Groups(a.Name)
	case kmsg.ACLResourceTypeTransactionalId:
		b.TransactionalIDs(a.Name)
	case kmsg.ACLResourceTypeCluster:
		b.Clusters()
	default:
		panic(fmt.Sprintf("kafkatest: no ACL builder for resource type %s", a.Resource))
	}
	return b
}

// Grant creates acls for principal ("User:app") and returns once every
// broker lists them.
func Grant(ctx context.Context, cl *kgo.Client, principal string, acls ...ACL) error {
	adm := kadm.NewClient(cl)
	for _, a := range acls {
		res, err := adm.CreateACLs(ctx, a.builder(principal))
		if err != nil {
			return fmt.Errorf("kafkatest: granting %s to %s: %w", a, principal, err)
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("kafkatest: granting %s to %s: %w", a, principal, r.Err)
			}
		}
	}
	return awaitACLs(ctx, cl, principal, acls, nil)
}

// Revoke deletes acls of principal and returns once no broker lists them.
func Revoke(ctx context.Context, cl *kgo.Client, principal string, acls ...ACL) error {
	adm := kadm.NewClient(cl)
	for _, a := range acls {
		res, err := adm.DeleteACLs(ctx, a.builder(principal).AllowHosts())
		if err != nil {
			return fmt.Errorf("kafkatest: revoking %s of %s: %w", a, principal, err)
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("kafkatest: revoking %s of %s: %w", a, principal, r.Err)
			}
		}
	}
	return awaitACLs(ctx, cl, principal, nil, acls)
}

// awaitACLs polls every broker's DescribeACLs (each answers from its own
// metadata image, so a rule is in force there once it lists it) until
// principal has every rule of present and none of absent; 30 s at most.
func awaitACLs(ctx context.Context, cl *kgo.Client, principal string, present, absent []ACL) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var why string
	for {
		why = aclsDiffer(ctx, cl, principal, present, absent)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: the ACLs of %s did not settle: %s", principal, why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func aclsDiffer(ctx context.Context, cl *kgo.Client, principal string, present, absent []ACL) string {
	meta, err := cl.RequestCachedMetadata(ctx, kmsg.NewPtrMetadataRequest(), 0)
	if err != nil {
		return err.Error()
	}
	for _, b := range meta.Brokers {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType = kmsg.ACLResourceTypeAny
		req.ResourcePatternType = kmsg.ACLResourcePatternTypeAny
		req.Principal = &principal
		req.Operation = kmsg.ACLOperationAny
		req.PermissionType = kmsg.ACLPermissionTypeAllow
		resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
		if err != nil {
			return fmt.Sprintf("broker %d: %v", b.NodeID, err)
		}
		if resp.ErrorCode != 0 {
			return fmt.Sprintf("broker %d: error code %d", b.NodeID, resp.ErrorCode)
		}
		var have []ACL
		for _, r := range resp.Resources {
			for _, a := range r.ACLs {
				have = append(have, ACL{Resource: r.ResourceType, Name: r.ResourceName, Pattern: r.ResourcePatternType, Op: a.Operation})
			}
		}
		for _, a := range present {
			if !slices.ContainsFunc(have, a.same) {
				return fmt.Sprintf("broker %d does not list %s yet", b.NodeID, a)
			}
		}
		for _, a := range absent {
			if slices.ContainsFunc(have, a.same) {
				return fmt.Sprintf("broker %d still lists %s", b.NodeID, a)
			}
		}
	}
	return ""
}

func (a ACL) same(b ACL) bool {
	return a.Resource == b.Resource && a.Name == b.Name && a.pattern() == b.pattern() && a.Op == b.Op
}
