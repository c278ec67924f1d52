package housekeeper

import (
	"testing"
)

// FuzzKeyspaceParse reads arbitrary keys under arbitrary prefixes. A key
// parse accepts is exactly the key of the set it names (ks.set(queue, k)
// == key), of a queue every batch accepts (checkQueue: non-empty, no brace);
// every set key of such a queue parses back to it; and a fence key is never
// a queue set.
func FuzzKeyspaceParse(f *testing.F) {
	for _, key := range []string{
		"deckard_v1:queue:{orders}",
		"deckard_v1:queue:{orders}:tmp",
		"deckard_v1:queue:{orders}:lock_ack",
		"deckard_v1:queue:{orders}:lock_nack",
		"deckard_v1:queue:{orders}:lock_ack:score",
		"deckard_v1:queue:{orders}:lock_nack:score",
		"deckard_v1:queue:{a::b:tmp}:tmp",
		"deckard_v1:queue:{x:lock_nack}:lock_nack",
		"deckard_v1:queue:{we*ird[1]?}:tmp",
		"deckard_v1:{recovery}",
		"deckard_v1:housekeeper:{orders}:fence:unlock",
		"deckard_v1:queue:orders:tmp",
		"deckard_v1:queue:{orders}x:tmp",
		"deckard_v1:queue:{orders}:tmp:archive",
		"deckard_v1:queue:{orders",
		"deckard_v1:queue:{}:tmp",
		"deckard_v1:queue:{a}b}:tmp",
		"deckard_v1:queue:{a{b}:tmp",
		"deckard_v1x:queue:{orders}:tmp",
	} {
		f.Add(DefaultPrefix, key)
	}
	f.Add("", ":queue:{q}")
	f.Add("a*b?[c]\\d", "a*b?[c]\\d:queue:{q}:lock_ack")
	f.Add("p:queue:{x}", "p:queue:{x}:queue:{q}:tmp")
	f.Fuzz(func(t *testing.T, prefix, key string) {
		ks := keyspace{prefix: prefix}
		if queue, k, ok := ks.parse(key); ok {
			if checkQueue(queue) != nil || k >= numKinds {
				t.Fatalf("parse(%q) = %q, %d: no queue set", key, queue, k)
			}
			if back := ks.set(queue, k); back != key {
				t.Fatalf("parse(%q) = %q, %d, whose key is %q", key, queue, k, back)
			}
		} else if queue != "" || k != 0 {
			t.Fatalf("parse(%q) refused it but returned %q, %d", key, queue, k)
		}
		// The key as a queue name.
		queue := key
		if checkQueue(queue) != nil {
			return
		}
		for k := range numKinds {
			set := ks.set(queue, k)
			if q, got, ok := ks.parse(set); !ok || q != queue || got != k {
				t.Fatalf("parse(set(%q, %d) = %q) = %q, %d, %v", queue, k, set, q, got, ok)
			}
		}
		for _, task := range []task{taskUnlock, taskTimeout} {
			if q, k, ok := ks.parse(ks.fence(queue, task)); ok {
				t.Fatalf("the fence key %q parses as set %d of queue %q", ks.fence(queue, task), k, q)
			}
		}
	})
}
