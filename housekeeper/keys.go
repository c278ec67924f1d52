package housekeeper

import (
	"errors"
	"strings"
)

// DefaultPrefix is Deckard's default key prefix.
const DefaultPrefix = "deckard_v1"

// kind is one of the six sorted sets Deckard keeps per queue.
type kind uint8

const (
	kindActive        kind = iota // <prefix>:queue:{Q}
	kindTmp                       // <prefix>:queue:{Q}:tmp
	kindLockAck                   // <prefix>:queue:{Q}:lock_ack
	kindLockNack                  // <prefix>:queue:{Q}:lock_nack
	kindLockAckScore              // <prefix>:queue:{Q}:lock_ack:score
	kindLockNackScore             // <prefix>:queue:{Q}:lock_nack:score
	numKinds
)

var kindSuffixes = [numKinds]string{"", ":tmp", ":lock_ack", ":lock_nack", ":lock_ack:score", ":lock_nack:score"}

// keyspace names the keys of one Deckard prefix.
type keyspace struct{ prefix string }

// set is the key of one of queue's sets.
func (ks keyspace) set(queue string, k kind) string {
	return ks.prefix + ":queue:{" + queue + "}" + kindSuffixes[k]
}

// fence is the key holding the highest fencing token seen for task on queue.
// It shares the queue's hash tag but lies outside the <prefix>:queue: space
// that discovery scans.
func (ks keyspace) fence(queue string, t task) string {
	return ks.prefix + ":housekeeper:{" + queue + "}:fence:" + string(t)
}

// index is the sorted set in which the instance on discovery duty publishes
// the sets it found (member: the set's key; score: a sequence number given
// when it was first published), and indexSeq the counter of those numbers.
// Both lie outside the <prefix>:queue: space.
func (ks keyspace) index() string    { return ks.prefix + ":housekeeper:sets" }
func (ks keyspace) indexSeq() string { return ks.prefix + ":housekeeper:sets:seq" }

// pattern is a SCAN MATCH pattern for the keys <prefix>:queue:{*}<suffix>.
func (ks keyspace) pattern(suffix string) string {
	return globEscape(ks.prefix) + ":queue:{*}" + suffix
}

// parse reads a key found by SCAN. The queue name is the hash tag (queue
// names never contain braces but may contain ':' and look like suffixes,
// e.g. "a::b:tmp"), and what follows the closing brace must be exactly one
// of the six suffixes. Anything else, a tag with a '{' in it included, is
// not a queue key: no batch could work it.
func (ks keyspace) parse(key string) (queue string, k kind, ok bool) {
	rest, found := strings.CutPrefix(key, ks.prefix+":queue:{")
	if !found {
		return "", 0, false
	}
	queue, suffix, found := strings.Cut(rest, "}")
	if !found || checkQueue(queue) != nil { // a queue name holds no brace
		return "", 0, false
	}
	for k, s := range kindSuffixes {
		if suffix == s {
			return queue, kind(k), true
		}
	}
	return "", 0, false
}

var errBadQueue = errors.New("housekeeper: queue name must be non-empty and free of '{' and '}'")

// checkQueue refuses names that would put a queue's keys in different
// Cluster slots.
func checkQueue(queue string) error {
	if queue == "" || strings.ContainsAny(queue, "{}") {
		return errBadQueue
	}
	return nil
}

// globEscape quotes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
