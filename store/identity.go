package store

import "fmt"

// GroupIdentity is the driving consumer's membership of its consumer group as
// its client knows it at one moment.
type GroupIdentity struct {
	// Group is the consumer group id.
	Group string
	// MemberID is the member id the coordinator assigned; empty before the
	// first join.
	MemberID string
	// Generation is the generation under the classic protocol and the
	// member epoch under the consumer protocol (KIP-848). It is below 1
	// before the first join.
	Generation int32
	// InstanceID is the static member id (group.instance.id), if any.
	InstanceID string
}

func (id GroupIdentity) String() string {
	s := fmt.Sprintf("group %q member %q generation %d", id.Group, id.MemberID, id.Generation)
	if id.InstanceID != "" {
		s += fmt.Sprintf(" instance %q", id.InstanceID)
	}
	return s
}

// Valid reports whether a transactional offset commit with this identity is
// validated by the coordinator. A commit with an empty member id and an
// unknown generation is accepted unfenced by Kafka, so it must never be sent
// (I4).
func (id GroupIdentity) Valid() bool {
	return id.Group != "" && id.MemberID != "" && id.Generation >= 1
}

// IdentityReader reads the driving consumer's current group identity. The
// engine publishes the identity after every poll; the store reads it for
// every transaction.
type IdentityReader interface {
	CurrentIdentity() GroupIdentity
}

// IdentityFunc adapts a function to IdentityReader.
type IdentityFunc func() GroupIdentity

// CurrentIdentity calls f.
func (f IdentityFunc) CurrentIdentity() GroupIdentity { return f() }

// NameProblem is what makes name invalid as a Kafka topic name, a
// group.instance.id or an application's name ("" if nothing).
func NameProblem(name string) string {
	switch {
	case name == "":
		return "empty"
	case name == "." || name == "..":
		return "not allowed"
	case len(name) > 249:
		return fmt.Sprintf("%d characters, more than 249", len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q is not allowed (letters, digits, '.', '_' and '-' are)", c)
		}
	}
	return ""
}
