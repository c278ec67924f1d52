package redisstore

import (
	"strconv"
	"strings"
	"sync"
)

// The key layout is described once, in the package documentation (doc.go);
// TestKeyLayoutIsDocumented keeps that description in step with these
// suffixes.
const (
	leaseSuffix   = ":lease"
	queueSuffix   = ":queue"
	waitersSuffix = ":waiters"
	markerSuffix  = ":marker"
	eventsSuffix  = ":events"
	sessionSuffix = ":session"
	namesSuffix   = ":names"
)

// emptyName is the encoding of the empty name: an empty hash tag "{}" would
// make Redis Cluster hash the whole key, scattering a name's keys over slots.
// "%00" is never produced for another name, since encodeName escapes every
// '%' as "%25".
const emptyName = "%00"

// encodeName escapes '%', '{' and '}' so that a name cannot end the hash tag
// early. The encoding keeps prefixes: enc(a) is a prefix of enc(a+b).
func encodeName(name string) string {
	if name == "" {
		return emptyName
	}
	if !strings.ContainsAny(name, "%{}") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// encodePrefix encodes a name prefix for a SCAN pattern; unlike encodeName
// it keeps the empty prefix empty.
func encodePrefix(prefix string) string {
	if prefix == "" {
		return ""
	}
	return encodeName(prefix)
}

// decodeName reverses encodeName; ok is false for text encodeName never
// produces (a key this store did not write).
func decodeName(enc string) (name string, ok bool) {
	if enc == emptyName {
		return "", true
	}
	if !strings.Contains(enc, "%") {
		return enc, true
	}
	var b strings.Builder
	b.Grow(len(enc))
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+3 > len(enc) {
			return "", false
		}
		switch enc[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// globEscape escapes the glob metacharacters of Redis' SCAN MATCH.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// nameKeys are the keys of one name.
type nameKeys struct {
	lease, queue, waiters, marker string
}

func (s *Store) keys(name string) nameKeys {
	enc := encodeName(name)
	// The three keys are written one after the other into one string and
	// sliced out of it: one allocation instead of three.
	suffixes := [...]string{leaseSuffix, queueSuffix, waitersSuffix}
	base := len(s.prefix) + len(":{") + len(enc) + len("}")
	size := 0
	for _, suffix := range suffixes {
		size += base + len(suffix)
	}
	var b strings.Builder
	b.Grow(size)
	var ends [len(suffixes)]int
	for i, suffix := range suffixes {
		b.WriteString(s.prefix)
		b.WriteString(":{")
		b.WriteString(enc)
		b.WriteString("}")
		b.WriteString(suffix)
		ends[i] = b.Len()
	}
	all := b.String()
	k := nameKeys{
		lease:   all[:ends[0]],
		queue:   all[ends[0]:ends[1]],
		waiters: all[ends[1]:ends[2]],
		marker:  s.marker,
	}
	if s.cluster {
		k.marker = s.slotMarker(slotOf(enc))
	}
	return k
}

// slotMarker is the data-loss marker key living in the given cluster slot.
func (s *Store) slotMarker(slot uint16) string {
	return s.prefix + ":{" + slotTags()[slot] + "}" + markerSuffix
}

// leaseKeyName returns the name of a lease key of this store.
func (s *Store) leaseKeyName(key string) (string, bool) {
	head := s.prefix + ":{"
	tail := "}" + leaseSuffix
	if !strings.HasPrefix(key, head) || !strings.HasSuffix(key, tail) || len(key) < len(head)+len(tail) {
		return "", false
	}
	enc := key[len(head) : len(key)-len(tail)]
	if strings.ContainsAny(enc, "{}") {
		return "", false
	}
	return decodeName(enc)
}

const numSlots = 16384

// slotOf is the Redis Cluster slot of a hash tag's content: CRC16-XMODEM
// modulo 16384.
func slotOf(tag string) uint16 {
	return crc16(tag) % numSlots
}

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTags maps every slot to the shortest decimal string hashing to it, so
// that "{<tag>}" places a key in a chosen slot. Built once, on first use.
var slotTags = sync.OnceValue(func() *[numSlots]string {
	var tags [numSlots]string
	left := numSlots
	for i := 0; left > 0; i++ {
		s := strconv.Itoa(i)
		slot := slotOf(s)
		if tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
	return &tags
})
