package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kafkaOptions are the flags of -world kafka: where the brokers are and
// how to reach them.
type kafkaOptions struct {
	brokers    string
	tls        bool
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	mechanism  string
	user       string
	password   string
}

func (k *kafkaOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&k.brokers, "brokers", "", "-world kafka: the seed brokers, host:port[,host:port...]")
	fs.BoolVar(&k.tls, "tls", false, "-world kafka: connect with TLS (implied by -tls-ca, -tls-cert)")
	fs.StringVar(&k.caFile, "tls-ca", "", "-world kafka: PEM file of the CA that signed the brokers' certificates (default: the system's)")
	fs.StringVar(&k.certFile, "tls-cert", "", "-world kafka: PEM file of the client certificate (with -tls-key)")
	fs.StringVar(&k.keyFile, "tls-key", "", "-world kafka: PEM file of the client key (with -tls-cert)")
	fs.StringVar(&k.serverName, "tls-server-name", "", "-world kafka: the name to verify the brokers' certificates against (default: the broker's host)")
	fs.StringVar(&k.mechanism, "sasl", "", "-world kafka: SASL mechanism: plain, scram-sha-256 or scram-sha-512 (with -sasl-user and -sasl-password)")
	fs.StringVar(&k.user, "sasl-user", "", "-world kafka: SASL user")
	fs.StringVar(&k.password, "sasl-password", "", "-world kafka: SASL password (default: $SIMULATE_SASL_PASSWORD)")
}

func (k *kafkaOptions) set() bool {
	return k.brokers != "" || k.tls || k.caFile != "" || k.certFile != "" || k.keyFile != "" || k.serverName != "" || k.mechanism != "" || k.user != "" || k.password != ""
}

func (k *kafkaOptions) validate() error {
	if k.brokers == "" {
		return usagef("-world kafka needs -brokers host:port")
	}
	if (k.certFile == "") != (k.keyFile == "") {
		return usagef("-tls-cert and -tls-key go together")
	}
	switch k.mechanism {
	case "":
		if k.user != "" || k.password != "" {
			return usagef("-sasl-user and -sasl-password need -sasl plain, scram-sha-256 or scram-sha-512")
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if k.password == "" {
			k.password = os.Getenv("SIMULATE_SASL_PASSWORD")
		}
		if k.user == "" || k.password == "" {
			return usagef("-sasl %s needs -sasl-user and -sasl-password (or $SIMULATE_SASL_PASSWORD)", k.mechanism)
		}
	default:
		return usagef("-sasl %q: want plain, scram-sha-256 or scram-sha-512", k.mechanism)
	}
	return nil
}

// seeds are the seed brokers.
func (k *kafkaOptions) seeds() []string {
	var out []string
	for _, b := range strings.Split(k.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// security is the TLS configuration (nil: none) and the SASL mechanism
// (nil: none) of the flags. The world does both on its connections
// itself (kfakeworld.Config.TLS, SASL), under its freezers: franz-go's
// kgo.DialTLSConfig excludes the kgo.Dialer they are.
func (k *kafkaOptions) security() (*tls.Config, sasl.Mechanism, error) {
	var cfg *tls.Config
	if k.tls || k.caFile != "" || k.certFile != "" {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: k.serverName}
		if k.caFile != "" {
			pem, err := os.ReadFile(k.caFile)
			if err != nil {
				return nil, nil, usagef("-tls-ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, usagef("-tls-ca %s: no PEM certificate in it", k.caFile)
			}
			cfg.RootCAs = pool
		}
		if k.certFile != "" {
			cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
			if err != nil {
				return nil, nil, usagef("-tls-cert/-tls-key: %v", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	var mech sasl.Mechanism
	switch k.mechanism {
	case "plain":
		mech = plain.Auth{User: k.user, Pass: k.password}.AsMechanism()
	case "scram-sha-256":
		mech = scram.Auth{User: k.user, Pass: k.password}.AsSha256Mechanism()
	case "scram-sha-512":
		mech = scram.Auth{User: k.user, Pass: k.password}.AsSha512Mechanism()
	}
	return cfg, mech, nil
}
