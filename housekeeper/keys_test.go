package housekeeper

import "testing"

func TestParseReadsTheQueueFromTheHashTag(t *testing.T) {
	ks := keyspace{prefix: "deckard_v1"}
	tests := []struct {
		key   string
		queue string
		kind  kind
		ok    bool
	}{
		{"deckard_v1:queue:{orders}", "orders", kindActive, true},
		{"deckard_v1:queue:{orders}:tmp", "orders", kindTmp, true},
		{"deckard_v1:queue:{a{b}:tmp", "", 0, false}, // a brace in the tag: no queue's key
		{"deckard_v1:queue:{orders}:lock_ack", "orders", kindLockAck, true},
		{"deckard_v1:queue:{orders}:lock_nack", "orders", kindLockNack, true},
		{"deckard_v1:queue:{orders}:lock_ack:score", "orders", kindLockAckScore, true},
		{"deckard_v1:queue:{orders}:lock_nack:score", "orders", kindLockNackScore, true},
		// Names that look like keys of other queues.
		{"deckard_v1:queue:{a::b:tmp}", "a::b:tmp", kindActive, true},
		{"deckard_v1:queue:{a::b:tmp}:tmp", "a::b:tmp", kindTmp, true},
		{"deckard_v1:queue:{x:lock_nack}:lock_nack", "x:lock_nack", kindLockNack, true},
		{"deckard_v1:queue:{q:lock_ack:score}:lock_ack:score", "q:lock_ack:score", kindLockAckScore, true},
		{"deckard_v1:queue:{we*ird[1]?}:tmp", "we*ird[1]?", kindTmp, true},
		// Not queue sets.
		{"deckard_v1:{recovery}", "", 0, false},
		{"deckard_v1:housekeeper:{orders}:fence:unlock", "", 0, false},
		{"deckard_v1:queue:orders:tmp", "", 0, false},
		{"deckard_v1:queue:{orders}x:tmp", "", 0, false},
		{"deckard_v1:queue:{orders}:tmp:archive", "", 0, false},
		{"deckard_v1:queue:{orders}:lock_xack", "", 0, false},
		{"deckard_v1:queue:{orders", "", 0, false},
		{"deckard_v1:queue:{}:tmp", "", 0, false},
		{"other:queue:{orders}:tmp", "", 0, false},
		{"deckard_v1x:queue:{orders}:tmp", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			queue, k, ok := ks.parse(tt.key)
			if queue != tt.queue || k != tt.kind || ok != tt.ok {
				t.Errorf("parse(%q) = %q, %d, %v; want %q, %d, %v", tt.key, queue, k, ok, tt.queue, tt.kind, tt.ok)
			}
			if ok {
				if back := ks.set(queue, k); back != tt.key {
					t.Errorf("set(%q, %d) = %q, want %q", queue, k, back, tt.key)
				}
			}
		})
	}
}

func TestPatternsEscapeThePrefix(t *testing.T) {
	tests := []struct{ prefix, want string }{
		{"deckard_v1", "deckard_v1:queue:{*}:tmp"},
		{"a*b?[c]\\d", "a\\*b\\?\\[c\\]\\\\d:queue:{*}:tmp"},
	}
	for _, tt := range tests {
		if got := (keyspace{prefix: tt.prefix}).pattern(":tmp"); got != tt.want {
			t.Errorf("pattern with prefix %q = %q, want %q", tt.prefix, got, tt.want)
		}
	}
}
