package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

func TestDecodeAcquire(t *testing.T) {
	t.Parallel()
	const at = 1_800_000_000_000
	tests := []struct {
		name    string
		reply   any
		want    acquireReply
		wantErr bool
	}{
		{"quarantined after a loss", []any{int64(-1), int64(1), int64(250)},
			acquireReply{lost: true, quarantined: true, retryAfter: 250 * time.Millisecond}, false},
		{"granted", []any{int64(1), int64(0), "h", "42", "v", int64(1500), int64(at), int64(0)},
			acquireReply{result: store.AcquireResult{Acquired: true, Lease: store.Lease{
				Name: "job", Holder: "h", Token: 42, Value: []byte("v"), TTL: 1500 * time.Millisecond, ExpiresAt: time.UnixMilli(at),
			}}}, false},
		{"refused for a holder", []any{int64(0), int64(0), "h", "42", "", int64(1500), int64(at), int64(at)},
			acquireReply{result: store.AcquireResult{RetryAt: time.UnixMilli(at), Lease: store.Lease{
				Name: "job", Holder: "h", Token: 42, TTL: 1500 * time.Millisecond, ExpiresAt: time.UnixMilli(at),
			}}}, false},
		{"refused for older waiters", []any{int64(0), int64(0), "", "", "", int64(0), int64(0), int64(0)},
			acquireReply{}, false},
		{"not an array", "OK", acquireReply{}, true},
		{"too short", []any{int64(1), int64(0), "h"}, acquireReply{}, true},
		{"a token that is not a number", []any{int64(1), int64(0), "h", "x", "", int64(1), int64(at), int64(0)}, acquireReply{}, true},
		{"an unknown status", []any{int64(2), int64(0), "", "", "", int64(0), int64(0), int64(0)}, acquireReply{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeAcquire("job", tc.reply)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.lost != tc.want.lost || got.quarantined != tc.want.quarantined || got.retryAfter != tc.want.retryAfter ||
				got.result.Acquired != tc.want.result.Acquired || !got.result.RetryAt.Equal(tc.want.result.RetryAt) {
				t.Errorf("decoded %+v, want %+v", got, tc.want)
			}
			sameLease(t, got.result.Lease, tc.want.result.Lease)
		})
	}
}

func TestDecodeRenew(t *testing.T) {
	t.Parallel()
	l, err := decodeRenew("job", []any{int64(1), "h", "7", "v", int64(2000), int64(1_800_000_000_000)})
	want := store.Lease{Name: "job", Holder: "h", Token: 7, Value: []byte("v"), TTL: 2 * time.Second, ExpiresAt: time.UnixMilli(1_800_000_000_000)}
	if err != nil {
		t.Fatal(err)
	}
	sameLease(t, l, want)
	if _, err := decodeRenew("job", []any{int64(0)}); !errors.Is(err, store.ErrLeaseNotHeld) {
		t.Errorf("not held: err = %v, want ErrLeaseNotHeld", err)
	}
	if _, err := decodeRenew("job", []any{int64(1), "h"}); err == nil || errors.Is(err, store.ErrLeaseNotHeld) {
		t.Errorf("too short: err = %v, want a reply error", err)
	}
}

func TestDecodeDescribe(t *testing.T) {
	t.Parallel()
	d, err := decodeDescribe("job", []any{"", "", "", int64(0), int64(0), "9", int64(2)})
	if err != nil || d.Held || d.LastToken != 9 || d.Waiters != 2 || d.Lease.Holder != "" {
		t.Errorf("free name: %+v, %v", d, err)
	}
	d, err = decodeDescribe("job", []any{"h", "9", "", int64(1000), int64(1_800_000_000_000), "9", int64(0)})
	if err != nil || !d.Held || d.Lease.Token != 9 || d.Lease.Name != "job" || d.Lease.Value != nil {
		t.Errorf("held name: %+v, %v", d, err)
	}
	if _, err := decodeDescribe("job", []any{"", "", "", int64(0), int64(0), int64(9), int64(0)}); err == nil {
		t.Error("a last token that is not a decimal string: no error")
	}
}

func TestDecodeCounts(t *testing.T) {
	t.Parallel()
	for _, decode := range []func(any) (bool, error){decodeRelease, decodeDequeue} {
		if ok, err := decode(int64(1)); !ok || err != nil {
			t.Errorf("1: %v, %v", ok, err)
		}
		if ok, err := decode(int64(0)); ok || err != nil {
			t.Errorf("0: %v, %v", ok, err)
		}
		if _, err := decode("1"); err == nil {
			t.Error(`"1": no error`)
		}
	}
}

func TestDecodeWatch(t *testing.T) {
	t.Parallel()
	const at = 1_800_000_000_000
	names := []string{"held", "free"}
	out := make([]store.Description, 2)
	err := decodeWatch(names, []any{"h", "7", "v", int64(1000), int64(at), "", "", "", int64(0), int64(0)}, out)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Lease{Name: "held", Holder: "h", Token: 7, Value: []byte("v"), TTL: time.Second, ExpiresAt: time.UnixMilli(at)}
	if !out[0].Held || out[1].Held || out[1].Lease.Holder != "" {
		t.Errorf("decoded %+v", out)
	}
	sameLease(t, out[0].Lease, want)
	if err := decodeWatch(names, []any{"h", "7", "v", int64(1000), int64(at)}, out); err == nil {
		t.Error("a reply for one name of two: no error")
	}
	if err := decodeWatch(names, "OK", out); err == nil {
		t.Error("not an array: no error")
	}
	if n, err := decodeRefresh(int64(3)); n != 3 || err != nil {
		t.Errorf("decodeRefresh(3) = %d, %v", n, err)
	}
}
