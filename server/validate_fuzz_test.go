package server_test

import (
	"context"
	"encoding/base64"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/errinfo"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// fuzzMaxTTL is the Service's MaxTTL in FuzzValidation.
const fuzzMaxTTL = 2 * time.Minute

// FuzzValidation builds every kind of request from fuzzed fields and sends
// it to a bare Service over a fresh memory store. The oracle is the proto's
// FieldRules, read independently of the validator: a request that breaks no
// rule is accepted (any answer but InvalidArgument, and never Internal or
// Unknown), and one that breaks a rule is refused with InvalidArgument, the
// details naming one field that breaks its rule. Nothing panics.
func FuzzValidation(f *testing.F) {
	// which, a (name/election/prefix), b (holder/candidate/page token),
	// value, n (token/term/page size), ttl seconds and nanos, wait seconds
	// and nanos, flags (1: no ttl, 2: no wait).
	f.Add(uint8(0), "team-a/job", "host-1 pid 7", []byte(nil), uint64(0), int64(30), int32(0), int64(0), int32(0), uint8(2))
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(0), int32(100_000_000), int64(300), int32(0), uint8(0))   // at min TTL and max wait
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(0), int32(99_999_999), int64(0), int32(0), uint8(2))      // under min TTL
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(120), int32(1), int64(0), int32(0), uint8(2))             // over max TTL by 1ns
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(30), int32(0), int64(300), int32(1), uint8(0))            // over max wait by 1ns
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(30), int32(0), int64(0), int32(-1), uint8(0))             // negative wait
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(1), int32(-5), int64(0), int32(0), uint8(2))              // nanos of the wrong sign
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(315_576_000_001), int32(0), int64(0), int32(0), uint8(2)) // past the Duration range
	f.Add(uint8(0), "team-a/job", "h", []byte(nil), uint64(0), int64(9_223_372_036), int32(854_775_808), int64(0), int32(0), uint8(2))
	f.Add(uint8(0), "", "", []byte(nil), uint64(0), int64(0), int32(0), int64(0), int32(0), uint8(3))
	for _, name := range []string{"/a", "a/", "a//b", "a/./b", "a/../b", "..", "a\x00b", "a\nb", "\xff", "é/ü", "a b", "a\u00a0b", "a\u200bb", strings.Repeat("n", 256), strings.Repeat("n", 257), strings.Repeat("é", 128) + "x"} {
		f.Add(uint8(0), name, "h", []byte(nil), uint64(0), int64(30), int32(0), int64(0), int32(0), uint8(2))
	}
	for _, holder := range []string{strings.Repeat("h", 128), strings.Repeat("h", 129), "h\x7f", "h\tx", "\xc3"} {
		f.Add(uint8(0), "n", holder, []byte(nil), uint64(0), int64(30), int32(0), int64(0), int32(0), uint8(2))
	}
	// capacity | weight<<32: a semaphore's share, a weight past the
	// capacity, past the largest capacity.
	for _, n := range []uint64{5 | 2<<32, 5 | 6<<32, 0 | 2<<32, 1_000_000 | 1_000_000<<32, 1_000_001 | 1<<32, 1_000_000 | 1_000_001<<32} {
		f.Add(uint8(0), "team-a/pool", "h", []byte(nil), n, int64(30), int32(0), int64(0), int32(0), uint8(2))
	}
	f.Add(uint8(1), "team-a/job", "h", []byte(nil), uint64(7), int64(30), int32(0), int64(0), int32(0), uint8(2)) // renew
	f.Add(uint8(1), "team-a/job", "h", []byte(nil), uint64(0), int64(30), int32(0), int64(0), int32(0), uint8(2))
	f.Add(uint8(2), "team-a/job", "h", []byte(nil), uint64(7), int64(0), int32(0), int64(0), int32(0), uint8(3)) // release
	f.Add(uint8(3), "team-a/job", "", []byte(nil), uint64(0), int64(0), int32(0), int64(0), int32(0), uint8(3))  // describe
	for _, prefix := range []string{"", "team-a/", "team-a/jo", "team-a/.", "team-a/..", "/", "team//", "team/../", "a\nb"} {
		f.Add(uint8(4), prefix, "", []byte(nil), uint64(0), int64(0), int32(0), int64(0), int32(0), uint8(3)) // list
	}
	f.Add(uint8(4), "", "bmFtZQ", []byte(nil), uint64(1001), int64(0), int32(0), int64(0), int32(0), uint8(3))
	f.Add(uint8(4), "", "not base64!", []byte(nil), uint64(1<<32-1), int64(0), int32(0), int64(0), int32(0), uint8(3)) // page size -1
	f.Add(uint8(5), "team-a/leader", "c", []byte("host-a:8080"), uint64(0), int64(30), int32(0), int64(1), int32(0), uint8(0))
	f.Add(uint8(5), "team-a/leader", "c", make([]byte, 65537), uint64(3), int64(30), int32(0), int64(0), int32(0), uint8(2))
	f.Add(uint8(6), "team-a/leader", "c", []byte(nil), uint64(3), int64(0), int32(0), int64(0), int32(0), uint8(3)) // resign
	f.Add(uint8(7), "team-a/leader", "", []byte(nil), uint64(0), int64(0), int32(0), int64(0), int32(0), uint8(3))  // leader
	f.Add(uint8(8), "team-a/leader", "", []byte(nil), uint64(0), int64(0), int32(0), int64(0), int32(0), uint8(3))  // observe

	f.Fuzz(func(t *testing.T, which uint8, a, b string, value []byte, n uint64, ttlS int64, ttlN int32, waitS int64, waitN int32, flags uint8) {
		var ttl, wait *durationpb.Duration
		if flags&1 == 0 {
			ttl = &durationpb.Duration{Seconds: ttlS, Nanos: ttlN}
		}
		if flags&2 == 0 {
			wait = &durationpb.Duration{Seconds: waitS, Nanos: waitN}
		}
		req := fuzzRequest(which, a, b, value, n, ttl, wait)
		broken := brokenFields(req.ProtoReflect(), fuzzMaxTTL)

		st := memstore.New()
		defer func() { _ = st.Close() }()
		svc := server.NewService(st, server.ServiceOptions{MaxTTL: fuzzMaxTTL})
		defer svc.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- fuzzSend(ctx, svc, req) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("%v: no answer after 5s on an idle store\n%s", req, buf[:runtime.Stack(buf, true)])
		}

		s := status.Convert(err)
		if s.Code() != codes.InvalidArgument {
			if len(broken) > 0 {
				t.Fatalf("%v breaks the rules of %v but was accepted: %v", req, keys(broken), err)
			}
			switch s.Code() {
			case codes.Internal, codes.Unknown, codes.Unavailable:
				t.Fatalf("%v: %v; a valid request on an idle store is answered", req, err)
			}
			return
		}
		field := refusedField(t, s)
		if !broken[field] {
			t.Fatalf("%v refused naming %q (%v); by the proto's rules only %v are invalid", req, field, err, keys(broken))
		}
	})
}

// fuzzRequest builds the request kind which%9 from the fuzzed fields.
func fuzzRequest(which uint8, a, b string, value []byte, n uint64, ttl, wait *durationpb.Duration) proto.Message {
	switch which % 9 {
	case 0:
		return &coordinatorv1.TryAcquireRequest{Name: a, Holder: b, Ttl: ttl, Wait: wait, Capacity: uint32(n), Weight: uint32(n >> 32)}
	case 1:
		return &coordinatorv1.RenewRequest{Name: a, Holder: b, Token: n, Ttl: ttl}
	case 2:
		return &coordinatorv1.ReleaseRequest{Name: a, Holder: b, Token: n}
	case 3:
		return &coordinatorv1.DescribeRequest{Name: a}
	case 4:
		return &coordinatorv1.ListRequest{Prefix: a, PageSize: int32(uint32(n)), PageToken: b}
	case 5:
		return &coordinatorv1.CampaignRequest{Election: a, Candidate: b, Value: value, Ttl: ttl, Wait: wait, Term: n}
	case 6:
		return &coordinatorv1.ResignRequest{Election: a, Candidate: b, Term: n}
	case 7:
		return &coordinatorv1.LeaderRequest{Election: a}
	default:
		return &coordinatorv1.ObserveRequest{Election: a}
	}
}

// fuzzSend calls the handler of req and returns its error.
func fuzzSend(ctx context.Context, svc *server.Service, req proto.Message) error {
	var err error
	switch req := req.(type) {
	case *coordinatorv1.TryAcquireRequest:
		_, err = svc.TryAcquire(ctx, req)
	case *coordinatorv1.RenewRequest:
		_, err = svc.Renew(ctx, req)
	case *coordinatorv1.ReleaseRequest:
		_, err = svc.Release(ctx, req)
	case *coordinatorv1.DescribeRequest:
		_, err = svc.Describe(ctx, req)
	case *coordinatorv1.ListRequest:
		_, err = svc.List(ctx, req)
	case *coordinatorv1.CampaignRequest:
		_, err = svc.Campaign(ctx, req)
	case *coordinatorv1.ResignRequest:
		_, err = svc.Resign(ctx, req)
	case *coordinatorv1.LeaderRequest:
		_, err = svc.Leader(ctx, req)
	case *coordinatorv1.ObserveRequest:
		// A caller that already left: what is valid ends Canceled.
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		err = svc.Observe(req, &fakeObserveStream{ctx: ctx}) //nolint:contextcheck // a stream carries its context, as gRPC's do

	default:
		panic("no handler for " + string(req.ProtoReflect().Descriptor().FullName()))
	}
	return err
}

// refusedField checks that s is the validator's refusal, consistent in its
// message and details, and returns the field it names.
func refusedField(t *testing.T, s *status.Status) string {
	t.Helper()
	var bad *errdetails.BadRequest
	var info *errdetails.ErrorInfo
	for _, d := range s.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			bad = d
		case *errdetails.ErrorInfo:
			info = d
		}
	}
	if bad == nil || len(bad.GetFieldViolations()) != 1 || info == nil {
		t.Fatalf("InvalidArgument %q without one BadRequest violation and an ErrorInfo: %v", s.Message(), s.Details())
	}
	v := bad.GetFieldViolations()[0]
	if info.GetReason() != "INVALID_FIELD" || info.GetDomain() != errinfo.Domain || info.GetMetadata()["field"] != v.GetField() {
		t.Fatalf("ErrorInfo %v does not name the BadRequest's field %q", info, v.GetField())
	}
	if v.GetDescription() == "" || s.Message() != v.GetField()+": "+v.GetDescription() {
		t.Fatalf("message %q; want %q", s.Message(), v.GetField()+": "+v.GetDescription())
	}
	return v.GetField()
}

// brokenFields returns the fields of m that break their (coordinator.v1.rules)
// by the rules' own text in rules.proto, and the two rules of ListRequest
// that its comments state: a negative page_size, a page_token that is not
// one of the server's (unpadded URL-safe base64).
func brokenFields(m protoreflect.Message, maxTTL time.Duration) map[string]bool {
	out := map[string]bool{}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		if m.Descriptor().FullName() == "coordinator.v1.TryAcquireRequest" && name == "weight" {
			// At most max_value, and at most the capacity (0 meaning 1).
			capacity := max(m.Get(fields.ByName("capacity")).Uint(), 1)
			if w := m.Get(fd).Uint(); w > uint64(server.FieldRules(fd).GetMaxValue()) || w > capacity {
				out[name] = true
			}
			continue
		}
		if m.Descriptor().FullName() == "coordinator.v1.ListRequest" && name == "page_token" {
			if _, err := base64.RawURLEncoding.DecodeString(m.Get(fd).String()); err != nil {
				out[name] = true
			}
			continue
		}
		rules := server.FieldRules(fd)
		if rules == nil {
			continue
		}
		if breaks(fd, rules, m, maxTTL) {
			out[name] = true
		}
	}
	return out
}

func breaks(fd protoreflect.FieldDescriptor, rules *coordinatorv1.FieldRules, m protoreflect.Message, maxTTL time.Duration) bool {
	v := m.Get(fd)
	switch fd.Kind() {
	case protoreflect.StringKind:
		s := v.String()
		if s == "" {
			return rules.GetRequired()
		}
		if n := rules.GetMaxBytes(); n > 0 && len(s) > int(n) {
			return true
		}
		switch rules.GetFormat() {
		case coordinatorv1.TextFormat_TEXT_FORMAT_PRINTABLE:
			return !printable(s)
		case coordinatorv1.TextFormat_TEXT_FORMAT_NAME:
			return !printable(s) || !goodSegments(strings.Split(s, "/"))
		case coordinatorv1.TextFormat_TEXT_FORMAT_NAME_PREFIX:
			segs := strings.Split(s, "/")
			return !printable(s) || !goodSegments(segs[:len(segs)-1])
		}
		return false
	case protoreflect.BytesKind:
		return rules.GetMaxBytes() > 0 && len(v.Bytes()) > int(rules.GetMaxBytes())
	case protoreflect.Uint64Kind:
		return rules.GetRequired() && v.Uint() == 0
	case protoreflect.Uint32Kind:
		return rules.GetMaxValue() > 0 && v.Uint() > uint64(rules.GetMaxValue())
	case protoreflect.Int32Kind:
		return v.Int() < 0 // page_size: larger values than max_value are lowered
	case protoreflect.MessageKind:
		if !m.Has(fd) {
			return rules.GetRequired()
		}
		d := v.Message().Interface().(*durationpb.Duration)
		if d.CheckValid() != nil {
			return true
		}
		hi := time.Duration(rules.GetMaxMillis()) * time.Millisecond
		if rules.GetMaxSetting() != "" {
			hi = maxTTL
		}
		lo := time.Duration(rules.GetMinMillis()) * time.Millisecond
		return nanos(d).Cmp(big.NewInt(int64(lo))) < 0 || (hi > 0 && nanos(d).Cmp(big.NewInt(int64(hi))) > 0)
	}
	panic("no rule of kind " + fd.Kind().String())
}

// nanos is d exactly, without AsDuration's saturation.
func nanos(d *durationpb.Duration) *big.Int {
	n := new(big.Int).Mul(big.NewInt(d.GetSeconds()), big.NewInt(1e9))
	return n.Add(n, big.NewInt(int64(d.GetNanos())))
}

// printable is TEXT_FORMAT_PRINTABLE: valid UTF-8 made of Unicode letters,
// marks, numbers, punctuation, symbols and the ASCII space.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r != ' ' && !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S) {
			return false
		}
	}
	return true
}

func goodSegments(segs []string) bool {
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// fakeObserveStream is an Observe stream whose caller has left.
type fakeObserveStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeObserveStream) Context() context.Context                  { return s.ctx }
func (s *fakeObserveStream) Send(*coordinatorv1.ObserveResponse) error { return nil }
