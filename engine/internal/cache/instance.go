package cache

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/snapfence/snapfence/store"
)

// instanceKey holds the cache's instance identity: made once, when the
// database first opens on disk, and kept for its life, so that a process
// restarted on the same directory names itself as it did before (a
// consumer group's static member id). It sorts apart from core's keys, as
// layoutKey does.
var instanceKey = []byte("\x00instance")

// maxHostPart bounds the host name's share of an identity.
const maxHostPart = 40

// Instance is the identity of an on-disk cache ("" in memory):
// letters, digits, '.', '_' and '-', the host's name it was made on and
// 16 random hex digits. Two caches never share one unless a directory
// was copied.
func (k *KV) Instance() string { return k.instance }

// ensureInstance reads the cache's identity, or makes and stores one.
func (k *KV) ensureInstance() (string, error) {
	v, closer, err := k.db.Get(instanceKey)
	if err == nil {
		id := string(v)
		_ = closer.Close()
		if validInstance(id) {
			return id, nil
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return "", err
	}
	id, err := newInstance()
	if err != nil {
		return "", err
	}
	if err := k.db.Set(instanceKey, []byte(id), pebble.NoSync); err != nil {
		return "", err
	}
	return id, k.db.Flush() // no WAL: the identity is durable once flushed
}

// newInstance makes an identity: the host's name, so that an operator
// listing the group's members sees where each runs, and randomness, so
// that two caches on one host differ.
func newInstance() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making the cache's instance identity: %w", err)
	}
	host, _ := os.Hostname()
	host = strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			return c // a character store.NameProblem allows
		}
		return '-'
	}, host)
	if len(host) > maxHostPart {
		host = host[:maxHostPart]
	}
	if host == "" {
		host = "snapfence"
	}
	return host + "-" + hex.EncodeToString(b[:]), nil
}

// validInstance: id is an identity newInstance could have made (a
// damaged one is replaced, costing one rebalance).
func validInstance(id string) bool {
	return len(id) >= 18 && len(id) <= maxHostPart+17 && store.NameProblem(id) == ""
}
