package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/snapfence/snapfence/internal/operator"
)

// settings are the connection and target settings every verb takes, from
// flags or from a JSON file (-config); a flag given overrides the file.
type settings struct {
	Brokers               []string      `json:"brokers"`
	TLS                   *tlsSettings  `json:"tls"`
	SASL                  *saslSettings `json:"sasl"`
	Application           string        `json:"application"`
	Input                 string        `json:"input"`
	Group                 string        `json:"group"`
	SnapshotTopic         string        `json:"snapshot_topic"`
	TransactionalIDPrefix string        `json:"transactional_id_prefix"`
	Plain                 bool          `json:"plain"`
}

// tlsSettings are the TLS settings of -config (and the -tls flags).
type tlsSettings struct {
	CAFile             string `json:"ca_file"`
	CertFile           string `json:"cert_file"`
	KeyFile            string `json:"key_file"`
	ServerName         string `json:"server_name"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify"`
}

// saslSettings are the SASL settings of -config (and the -sasl flags).
type saslSettings struct {
	Mechanism    string `json:"mechanism"`
	User         string `json:"user"`
	PasswordFile string `json:"password_file"`
}

// flags binds the settings' flags to fs; load then reads -config and
// applies the flags that were set over it.
type flags struct {
	config, brokers, app, input, group, snapshots, prefix string
	tlsOn                                                 bool
	caFile, certFile, keyFile, serverName                 string
	saslMech, saslUser, saslPassFile                      string
	plain, json                                           bool
}

func (f *flags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "a JSON `file` of connection and target settings (see snapfence -h); flags override it")
	fs.StringVar(&f.brokers, "brokers", os.Getenv("SNAPFENCE_BROKERS"), "seed brokers, `host:port,...` (default $SNAPFENCE_BROKERS)")
	fs.StringVar(&f.app, "app", "", "the application's `name` (its kafka.Config.Application / service.Config.Application)")
	fs.StringVar(&f.input, "input", "", "the input `topic`")
	fs.StringVar(&f.group, "group", "", "the consumer `group` (default: the application)")
	fs.StringVar(&f.snapshots, "snapshot-topic", "", "the snapshot `topic` (default: <app>-<input>-snapshots)")
	fs.StringVar(&f.prefix, "txn-prefix", "", "the transactional.id `prefix` (default: the application)")
	fs.BoolVar(&f.plain, "plain", false, "the application runs in Plain mode (no transactions)")
	fs.BoolVar(&f.tlsOn, "tls", false, "dial the brokers with TLS (the system's roots unless -tls-ca)")
	fs.StringVar(&f.caFile, "tls-ca", "", "a PEM `file` of CA certificates to trust (implies -tls)")
	fs.StringVar(&f.certFile, "tls-cert", "", "a PEM client certificate `file` (with -tls-key)")
	fs.StringVar(&f.keyFile, "tls-key", "", "the client certificate's PEM key `file`")
	fs.StringVar(&f.serverName, "tls-server-name", "", "the `name` to verify the brokers' certificates against")
	fs.StringVar(&f.saslMech, "sasl", "", "SASL `mechanism`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	fs.StringVar(&f.saslUser, "sasl-user", "", "SASL `user`")
	fs.StringVar(&f.saslPassFile, "sasl-password-file", "", "a `file` holding the SASL password (default $SNAPFENCE_SASL_PASSWORD)")
	fs.BoolVar(&f.json, "json", false, "print JSON, for scripts")
}

// load returns the connection and target the flags (over -config) give.
func (f *flags) load(fs *flag.FlagSet) (operator.Conn, operator.Target, error) {
	var s settings
	if f.config != "" {
		b, err := os.ReadFile(f.config)
		if err != nil {
			return operator.Conn{}, operator.Target{}, err
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return operator.Conn{}, operator.Target{}, fmt.Errorf("-config %s: %w", f.config, err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	str := func(name, v string, dst *string) {
		if set[name] || *dst == "" {
			*dst = v
		}
	}
	var brokers string
	str("brokers", f.brokers, &brokers)
	if brokers != "" {
		s.Brokers = strings.Split(brokers, ",")
	}
	str("app", f.app, &s.Application)
	str("input", f.input, &s.Input)
	str("group", f.group, &s.Group)
	str("snapshot-topic", f.snapshots, &s.SnapshotTopic)
	str("txn-prefix", f.prefix, &s.TransactionalIDPrefix)
	if set["plain"] {
		s.Plain = f.plain
	}
	if f.tlsOn || f.caFile != "" || f.certFile != "" || f.serverName != "" {
		if s.TLS == nil {
			s.TLS = new(tlsSettings)
		}
		str("tls-ca", f.caFile, &s.TLS.CAFile)
		str("tls-cert", f.certFile, &s.TLS.CertFile)
		str("tls-key", f.keyFile, &s.TLS.KeyFile)
		str("tls-server-name", f.serverName, &s.TLS.ServerName)
	}
	if f.saslMech != "" {
		if s.SASL == nil {
			s.SASL = new(saslSettings)
		}
		s.SASL.Mechanism = f.saslMech
		str("sasl-user", f.saslUser, &s.SASL.User)
		str("sasl-password-file", f.saslPassFile, &s.SASL.PasswordFile)
	}
	conn, err := s.conn()
	t := operator.Target{Application: s.Application, Input: s.Input, Group: s.Group, SnapshotTopic: s.SnapshotTopic,
		TransactionalIDPrefix: s.TransactionalIDPrefix, Plain: s.Plain}
	return conn, t, err
}

func (s settings) conn() (operator.Conn, error) {
	c := operator.Conn{Brokers: s.Brokers}
	if len(c.Brokers) == 0 {
		return c, errors.New("no brokers: give -brokers host:port, $SNAPFENCE_BROKERS or \"brokers\" in -config")
	}
	if t := s.TLS; t != nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return c, fmt.Errorf("TLS CA: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return c, fmt.Errorf("TLS CA %s: no PEM certificate in it", t.CAFile)
			}
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			return c, errors.New("TLS: give both a client certificate and its key, or neither")
		}
		if t.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return c, fmt.Errorf("TLS client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		c.TLS = cfg
	}
	if a := s.SASL; a != nil {
		pass := os.Getenv("SNAPFENCE_SASL_PASSWORD")
		if a.PasswordFile != "" {
			b, err := os.ReadFile(a.PasswordFile)
			if err != nil {
				return c, fmt.Errorf("SASL password: %w", err)
			}
			pass = strings.TrimRight(string(b), "\r\n")
		}
		if a.User == "" {
			return c, errors.New("SASL: no user (-sasl-user)")
		}
		var m sasl.Mechanism
		switch strings.ToUpper(a.Mechanism) {
		case "PLAIN":
			m = plain.Auth{User: a.User, Pass: pass}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: a.User, Pass: pass}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: a.User, Pass: pass}.AsSha512Mechanism()
		default:
			return c, fmt.Errorf("SASL mechanism %q: one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", a.Mechanism)
		}
		c.SASL = m
	}
	return c, nil
}
