//go:build it

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/snapfence/snapfence/internal/kafkatest"
)

// The command on a secured cluster (TLS with the cluster's own CA,
// SASL/SCRAM-SHA-512, ACLs), from flags and from a -config file, as the
// admin; a wrong password fails naming the authentication, and no
// password or secret is printed.
func TestSecuredCommand(t *testing.T) {
	s := kafkatest.SecuredFromEnv(t)
	ctx := context.Background()
	cl, adm := s.Admin(t)
	input := fmt.Sprint("secured-cmd-", time.Now().UnixNano())
	if _, err := adm.CreateTopic(ctx, 2, -1, nil, input); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: input, Key: []byte("k"), Value: []byte("1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ca, dir := os.Getenv(kafkatest.EnvCA), os.Getenv(kafkatest.EnvSASLDir)
	brokers := strings.Join(s.Brokers, ",")

	flags := []string{"status", "-json", "-brokers", brokers, "-app", "secured-app", "-input", input,
		"-tls-ca", ca, "-sasl", "SCRAM-SHA-512", "-sasl-user", "admin", "-sasl-password-file", filepath.Join(dir, "admin")}
	code, out, errOut := snapfence(flags...)
	var st struct {
		Partitions []struct {
			End int64 `json:"end"`
		} `json:"partitions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Partitions) != 2 {
		t.Fatalf("status with flags: exit %d\n%s\n%s", code, out, errOut)
	}

	cfg := filepath.Join(t.TempDir(), "snapfence.json")
	body := fmt.Sprintf(`{"brokers": %s, "application": "secured-app", "input": %q,
		"tls": {"ca_file": %q}, "sasl": {"mechanism": "SCRAM-SHA-512", "user": "admin", "password_file": %q}}`,
		mustJSON(t, s.Brokers), input, ca, filepath.Join(dir, "admin"))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := snapfence("status", "-config", cfg); code != 0 || !strings.Contains(out, input) {
		t.Fatalf("status with -config: exit %d\n%s\n%s", code, out, errOut)
	}

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = snapfence("status", "-config", cfg, "-sasl", "SCRAM-SHA-512", "-sasl-user", "admin", "-sasl-password-file", wrong, "-timeout", "30s")
	if code != 1 || !strings.Contains(strings.ToLower(errOut), "authentic") {
		t.Fatalf("a wrong password: exit %d, want 1 naming the authentication\n%s\n%s", code, out, errOut)
	}
	if pw := s.Password(t, "admin"); strings.Contains(out+errOut, pw) || strings.Contains(out+errOut, "not-the-password") {
		t.Fatalf("a password was printed:\n%s\n%s", out, errOut)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
