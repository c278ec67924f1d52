package client

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
)

// The proto is the one source of what the three clients share; these tests
// hold the SDK to it, so that a value copied by hand again (and drifting)
// fails here. The Python and TypeScript clients have the same tests.

// specRules reads the Coordinator service's ClientRules the way any client
// of the proto would.
func specRules(t *testing.T) *coordinatorv1.ClientRules {
	t.Helper()
	opts := coordinatorv1.File_coordinator_v1_coordinator_proto.Services().ByName("Coordinator").Options()
	r, ok := proto.GetExtension(opts, coordinatorv1.E_ClientRules).(*coordinatorv1.ClientRules)
	if !ok || r == nil {
		t.Fatal("coordinator.v1.Coordinator has no (coordinator.v1.client_rules) option")
	}
	return r
}

func specMillis(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }

func TestEveryClientRuleIsSet(t *testing.T) {
	r := specRules(t).ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !r.Has(fd) {
			t.Errorf("the (client_rules) option of coordinator.v1.Coordinator does not set %s", fd.Name())
		}
	}
}

func TestTheSDKTakesItsLimitsAndTimingsFromTheProto(t *testing.T) {
	r := specRules(t)
	holder := specFieldRules(t, &coordinatorv1.TryAcquireRequest{}, "holder")
	wait := specFieldRules(t, &coordinatorv1.TryAcquireRequest{}, "wait")
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		what      string
		got, want any
	}{
		{"DefaultTTL", DefaultTTL, specMillis(r.GetDefaultTtlMillis())},
		{"a Client's default TTL", cfg.ttl, specMillis(r.GetDefaultTtlMillis())},
		{"DefaultCloseTimeout", DefaultCloseTimeout, specMillis(r.GetCloseTimeoutMillis())},
		{"a Client's default close timeout", cfg.closeTimeout, specMillis(r.GetCloseTimeoutMillis())},
		{"the longest wait of one call", maxWait, specMillis(wait.GetMaxMillis())},
		{"the identity limit", maxIdentityBytes, int(holder.GetMaxBytes()) - int(r.GetHolderSuffixBytes())},
		{"the answer margin", answerMargin, specMillis(r.GetAnswerMarginMillis())},
		{"RunAsLeader's early return", leaderEarlyReturn, specMillis(r.GetLeaderEarlyReturnMillis())},
		{"whether RunAsLeader campaigns again", leaderCampaignsAgain, r.GetLeaderCampaignsAgain()},
		{"the error domain", errorDomain, r.GetErrorDomain()},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s is %v; the proto says %v", tt.what, tt.got, tt.want)
		}
	}

	// The identity limit, as New applies it.
	limit := int(holder.GetMaxBytes()) - int(r.GetHolderSuffixBytes())
	if _, err := newConfig([]Option{WithIdentity(strings.Repeat("a", limit))}); err != nil {
		t.Errorf("an identity of %d bytes is refused: %v", limit, err)
	}
	if _, err := newConfig([]Option{WithIdentity(strings.Repeat("a", limit+1))}); err == nil {
		t.Errorf("an identity of %d bytes is accepted", limit+1)
	}

	// The validity margin, at TTLs where each of its bounds applies.
	for _, ttl := range []time.Duration{60 * time.Millisecond, 200 * time.Millisecond, 15 * time.Second} {
		want := min(max(ttl*time.Duration(r.GetValidityMarginPercent())/100, specMillis(r.GetValidityMarginMinMillis())),
			ttl*time.Duration(r.GetValidityMarginMaxPercent())/100)
		if got := driftMargin(ttl); got != want {
			t.Errorf("driftMargin(%s) = %s; the proto says %s", ttl, got, want)
		}
	}
}

// TestTheSDKsDelaysSpreadAsTheProtoSays samples each kind of delay: every
// one lies within the proto's jitter of its nominal value (and at most at
// the maximum, for a backoff's last delays), and together the first delays
// reach past half of it, so that a narrower jitter than the proto's fails
// too.
func TestTheSDKsDelaysSpreadAsTheProtoSays(t *testing.T) {
	r := specRules(t)
	const ttl = 9 * time.Second
	retryJitter := float64(r.GetRetryJitterPercent()) / 100
	renewalJitter := float64(r.GetRenewalJitterPercent()) / 100
	floor := specMillis(r.GetRenewalRetryFloorMillis())
	tests := []struct {
		what    string
		nominal time.Duration
		jitter  float64
		capped  bool // the nominal delay is the backoff's maximum
		sample  func() time.Duration
	}{
		{"the first retry of a call", specMillis(r.GetRetryMinMillis()), retryJitter, false, func() time.Duration { return newCallBackoff().Next() }},
		{"the last retry of a call", specMillis(r.GetRetryMaxMillis()), retryJitter, true, func() time.Duration { return nth(newCallBackoff(), 30) }},
		{"the first retry of a renewal", max(ttl*time.Duration(r.GetRenewalRetryMinPercent())/100, floor), retryJitter, false, func() time.Duration { return renewalBackoff(ttl).Next() }},
		{"the last retry of a renewal", max(ttl*time.Duration(r.GetRenewalRetryMaxPercent())/100, floor), retryJitter, true, func() time.Duration { return nth(renewalBackoff(ttl), 30) }},
		{"the first pause of RunAsLeader", specMillis(r.GetLeaderRetryMinMillis()), retryJitter, false, func() time.Duration { return newLeaderBackoff().Next() }},
		{"the last pause of RunAsLeader", specMillis(r.GetLeaderRetryMaxMillis()), retryJitter, true, func() time.Duration { return nth(newLeaderBackoff(), 30) }},
		{"a renewal", ttl / time.Duration(r.GetRenewalsPerTtl()), renewalJitter, false, func() time.Duration {
			var s session
			s.granted(time.Time{}, ttl)
			return s.nextRenew.Sub(time.Time{})
		}},
	}
	for _, tt := range tests {
		lo, hi := tt.nominal, tt.nominal
		for range 2000 {
			d := tt.sample()
			lo, hi = min(lo, d), max(hi, d)
		}
		spread := float64(tt.nominal) * tt.jitter
		if float64(tt.nominal-lo) > spread+1 || float64(hi-tt.nominal) > spread+1 || tt.capped && hi > tt.nominal {
			t.Errorf("%s: delays from %s to %s; the proto allows %s ± %.0f%%, held to the maximum", tt.what, lo, hi, tt.nominal, 100*tt.jitter)
		}
		if !tt.capped && float64(max(tt.nominal-lo, hi-tt.nominal)) < spread/2 {
			t.Errorf("%s: delays from %s to %s; the proto spreads %s by ± %.0f%%", tt.what, lo, hi, tt.nominal, 100*tt.jitter)
		}
	}
}

func nth(b *backoff.Backoff, n int) time.Duration {
	for range n - 1 {
		b.Next()
	}
	return b.Next()
}

func TestTheReasonsThatEndALeaseAreTheProtosEndsLease(t *testing.T) {
	var want []string
	values := coordinatorv1.ErrorReason(0).Descriptor().Values()
	for i := range values.Len() {
		v := values.Get(i)
		if proto.GetExtension(v.Options(), coordinatorv1.E_EndsLease).(bool) {
			want = append(want, string(v.Name()))
		}
		if got, ends := endsLease(string(v.Name())), proto.GetExtension(v.Options(), coordinatorv1.E_EndsLease).(bool); got != ends {
			t.Errorf("endsLease(%s) = %v; the proto's (ends_lease) is %v", v.Name(), got, ends)
		}
	}
	if len(want) == 0 {
		t.Fatal("no ErrorReason is marked (coordinator.v1.ends_lease)")
	}
	if got := slices.Sorted(maps.Keys(leaseEndingReasons)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("the reasons that end a lease are %v; the proto marks %v", got, want)
	}
}

// TestTheSDKClassesCodesAsTheProtoSays: the codes retried and those whose
// outcome is unknown are the proto's transient_codes and
// outcome_unknown_codes, every code checked both ways.
func TestTheSDKClassesCodesAsTheProtoSays(t *testing.T) {
	r := specRules(t)
	if len(r.GetTransientCodes()) == 0 || len(r.GetOutcomeUnknownCodes()) == 0 {
		t.Fatal("the proto lists no transient or no outcome-unknown code")
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		err := status.Error(c, "test")
		wantTransient := slices.Contains(r.GetTransientCodes(), code.Code(c))
		wantUnknown := slices.Contains(r.GetOutcomeUnknownCodes(), code.Code(c))
		if c == codes.OK {
			continue // no error to class
		}
		if transient(err) != wantTransient || outcomeUnknown(err) != wantUnknown {
			t.Errorf("%s: transient %t, outcome unknown %t; the proto says %t, %t", c, transient(err), outcomeUnknown(err), wantTransient, wantUnknown)
		}
	}
	// Whatever its code, a call the Client's Close cut short is not retried.
	if transient(ErrClosed) {
		t.Error("ErrClosed is transient")
	}
}

// specFieldRules returns the rules of msg's field.
func specFieldRules(t *testing.T, msg proto.Message, field protoreflect.Name) *coordinatorv1.FieldRules {
	t.Helper()
	fd := msg.ProtoReflect().Descriptor().Fields().ByName(field)
	r, _ := proto.GetExtension(fd.Options(), coordinatorv1.E_Rules).(*coordinatorv1.FieldRules)
	if r == nil {
		t.Fatalf("%s has no (coordinator.v1.rules) option", field)
	}
	return r
}
