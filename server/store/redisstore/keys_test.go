package redisstore

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestNameEncodingRoundTrips(t *testing.T) {
	t.Parallel()
	for _, name := range append(oddNames, "%%{{}}", "a%7Db") {
		enc := encodeName(name)
		if strings.ContainsAny(enc, "{}") || enc == "" {
			t.Errorf("encodeName(%q) = %q: empty or has a brace", name, enc)
		}
		if got, ok := decodeName(enc); !ok || got != name {
			t.Errorf("decodeName(encodeName(%q)) = %q, %v", name, got, ok)
		}
		for i := 1; i < len(name); i++ { // prefixes encode to prefixes, for SCAN MATCH
			if p := encodePrefix(name[:i]); !strings.HasPrefix(enc, p) {
				t.Errorf("encodePrefix(%q) = %q is not a prefix of %q", name[:i], p, enc)
			}
		}
	}
	for _, bad := range []string{"%", "%7", "%41", "%7b", "a%2"} {
		if _, ok := decodeName(bad); ok {
			t.Errorf("decodeName(%q) accepted text encodeName never writes", bad)
		}
	}
}

// hashTag is the part of key Redis Cluster hashes.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestKeysOfANameShareASlot(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		s := &Store{prefix: "co:p", cluster: cluster}
		for _, name := range oddNames {
			k := s.keys(name)
			slot := slotOf(hashTag(k.lease))
			for _, key := range []string{k.queue, k.waiters} {
				if got := slotOf(hashTag(key)); got != slot {
					t.Errorf("name %q: key %q in slot %d, lease in %d", name, key, got, slot)
				}
			}
			if cluster && slotOf(hashTag(k.marker)) != slot {
				t.Errorf("name %q: marker %q not in the lease's slot %d", name, k.marker, slot)
			}
			if got, ok := s.leaseKeyName(k.lease); !ok || got != name {
				t.Errorf("leaseKeyName(%q) = %q, %v; want %q", k.lease, got, ok, name)
			}
		}
	}
}

func TestSlots(t *testing.T) {
	t.Parallel()
	// Reference values from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]uint16{"foo": 12182, "bar": 5061, "": 0} {
		if got := slotOf(key); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", key, got, want)
		}
	}
	tags := slotTags()
	for slot, tag := range tags {
		if tag == "" || slotOf(tag) != uint16(slot) {
			t.Fatalf("slot %d: tag %q hashes to %d", slot, tag, slotOf(tag))
		}
	}
}

// TestKeyLayoutIsDocumented: the package documentation is the one description
// of the key layout, so every key a name has, the markers and the channel
// must appear in it.
func TestKeyLayoutIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	const prefix, enc = "<prefix>", "<enc>"
	keys := []string{prefix + eventsSuffix}
	for _, cluster := range []bool{false, true} {
		s := &Store{prefix: prefix, cluster: cluster}
		k := reflect.ValueOf(s.keys(enc))
		for i := range k.NumField() {
			key := k.Field(i).String()
			if cluster && k.Type().Field(i).Name == "marker" {
				key = prefix + ":{<tag>}" + markerSuffix
			}
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		if !strings.Contains(string(doc), "//\t"+key+" ") {
			t.Errorf("doc.go's key layout does not describe %s", key)
		}
	}
}
