package coordinatord_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// TestValidationFollowsTheProtoRules checks the server against the one
// table of request limits, the FieldRules options in the proto: for every
// annotated field of every request, a value at each limit is accepted and
// one just past it is refused with INVALID_FIELD naming that field. A rule
// added to the proto is tested here without a new line of test.
func TestValidationFollowsTheProtoRules(t *testing.T) {
	cfg := testConfig(t, "memory")
	c := start(t, cfg)
	ctx := servertest.Timeout(t, 60*time.Second)

	// A valid request of each type, on a name of its own so that nothing
	// waits; and how to send it, with its refusal as a status error.
	var seq int
	fresh := func() string { seq++; return fmt.Sprintf("rules/n%d", seq) }
	ttl := servertest.Dur(time.Second)
	// A group's members and leases: n valid ones, each on a name of its
	// own (at the largest capacity, as TryAcquireRequest's).
	members := func(n int) []*coordinatorv1.GroupMember {
		out := make([]*coordinatorv1.GroupMember, n)
		for i := range out {
			out[i] = &coordinatorv1.GroupMember{Name: fresh(), Capacity: uint32(server.MaxCapacity)}
		}
		return out
	}
	groupLeases := func(n int) []*coordinatorv1.GroupLease {
		out := make([]*coordinatorv1.GroupLease, n)
		for i := range out {
			out[i] = &coordinatorv1.GroupLease{Name: fresh(), Token: 1}
		}
		return out
	}
	acquireGroup := func(m proto.Message) error {
		_, err := c.client.AcquireGroup(ctx, m.(*coordinatorv1.AcquireGroupRequest))
		return err
	}
	releaseGroup := func(m proto.Message) error {
		_, err := c.client.ReleaseGroup(ctx, m.(*coordinatorv1.ReleaseGroupRequest))
		return err
	}
	// within, for a message sent inside a request (a group's member), is
	// the one of m whose field is tested, and the field's path before its
	// name in the refusal.
	within := map[protoreflect.FullName]func(m proto.Message) (protoreflect.Message, string){
		"coordinator.v1.GroupMember": func(m proto.Message) (protoreflect.Message, string) {
			return m.(*coordinatorv1.AcquireGroupRequest).GetMembers()[0].ProtoReflect(), "members[0]."
		},
		"coordinator.v1.GroupLease": func(m proto.Message) (protoreflect.Message, string) {
			return m.(*coordinatorv1.ReleaseGroupRequest).GetLeases()[0].ProtoReflect(), "leases[0]."
		},
	}
	// lists, for a request with a repeated field, make a value of it with
	// n valid entries.
	lists := map[protoreflect.FullName]func(n int) protoreflect.Value{
		"coordinator.v1.AcquireGroupRequest": func(n int) protoreflect.Value {
			return listOf(&coordinatorv1.AcquireGroupRequest{Members: members(n)}, "members")
		},
		"coordinator.v1.RenewGroupRequest": func(n int) protoreflect.Value {
			return listOf(&coordinatorv1.RenewGroupRequest{Leases: groupLeases(n)}, "leases")
		},
		"coordinator.v1.ReleaseGroupRequest": func(n int) protoreflect.Value {
			return listOf(&coordinatorv1.ReleaseGroupRequest{Leases: groupLeases(n)}, "leases")
		},
	}
	requests := map[protoreflect.FullName]struct {
		valid func() proto.Message
		send  func(proto.Message) error
	}{
		"coordinator.v1.TryAcquireRequest": {
			func() proto.Message {
				// The largest capacity, so that every weight up to its
				// max_value fits (a weight above the capacity is refused
				// naming "weight" too).
				return &coordinatorv1.TryAcquireRequest{Name: fresh(), Holder: "h", Ttl: ttl, Capacity: uint32(server.MaxCapacity)}
			},
			func(m proto.Message) error {
				_, err := c.client.TryAcquire(ctx, m.(*coordinatorv1.TryAcquireRequest))
				return err
			},
		},
		"coordinator.v1.RenewRequest": {
			func() proto.Message {
				return &coordinatorv1.RenewRequest{Name: fresh(), Holder: "h", Token: 1, Ttl: ttl}
			},
			func(m proto.Message) error {
				_, err := c.client.Renew(ctx, m.(*coordinatorv1.RenewRequest))
				return err
			},
		},
		"coordinator.v1.ReleaseRequest": {
			func() proto.Message { return &coordinatorv1.ReleaseRequest{Name: fresh(), Holder: "h", Token: 1} },
			func(m proto.Message) error {
				_, err := c.client.Release(ctx, m.(*coordinatorv1.ReleaseRequest))
				return err
			},
		},
		"coordinator.v1.DescribeRequest": {
			func() proto.Message { return &coordinatorv1.DescribeRequest{Name: fresh()} },
			func(m proto.Message) error {
				_, err := c.client.Describe(ctx, m.(*coordinatorv1.DescribeRequest))
				return err
			},
		},
		"coordinator.v1.ListRequest": {
			func() proto.Message { return &coordinatorv1.ListRequest{} },
			func(m proto.Message) error { _, err := c.client.List(ctx, m.(*coordinatorv1.ListRequest)); return err },
		},
		"coordinator.v1.CampaignRequest": {
			func() proto.Message {
				return &coordinatorv1.CampaignRequest{Election: fresh(), Candidate: "h", Ttl: ttl}
			},
			func(m proto.Message) error {
				_, err := c.client.Campaign(ctx, m.(*coordinatorv1.CampaignRequest))
				return err
			},
		},
		"coordinator.v1.ResignRequest": {
			func() proto.Message { return &coordinatorv1.ResignRequest{Election: fresh(), Candidate: "h", Term: 1} },
			func(m proto.Message) error {
				_, err := c.client.Resign(ctx, m.(*coordinatorv1.ResignRequest))
				return err
			},
		},
		"coordinator.v1.LeaderRequest": {
			func() proto.Message { return &coordinatorv1.LeaderRequest{Election: fresh()} },
			func(m proto.Message) error {
				_, err := c.client.Leader(ctx, m.(*coordinatorv1.LeaderRequest))
				return err
			},
		},
		"coordinator.v1.StreamOperation": {
			func() proto.Message { return streamAcquire(1, fresh(), "h", 0) },
			func(m proto.Message) error { return sessionOnce(t, ctx, c, m.(*coordinatorv1.StreamOperation)) },
		},
		"coordinator.v1.ObserveRequest": {
			func() proto.Message { return &coordinatorv1.ObserveRequest{Election: fresh()} },
			func(m proto.Message) error { return observeOnce(ctx, c, m.(*coordinatorv1.ObserveRequest)) },
		},
		"coordinator.v1.AcquireGroupRequest": {
			func() proto.Message {
				return &coordinatorv1.AcquireGroupRequest{Members: members(1), Holder: "h", Ttl: ttl}
			},
			acquireGroup,
		},
		"coordinator.v1.GroupMember": {
			func() proto.Message {
				return &coordinatorv1.AcquireGroupRequest{Members: members(1), Holder: "h", Ttl: ttl}
			},
			acquireGroup,
		},
		// A lease that is not held is refused, but not as invalid.
		"coordinator.v1.RenewGroupRequest": {
			func() proto.Message {
				return &coordinatorv1.RenewGroupRequest{Holder: "h", Leases: groupLeases(1), Ttl: ttl}
			},
			func(m proto.Message) error {
				_, err := c.client.RenewGroup(ctx, m.(*coordinatorv1.RenewGroupRequest))
				return err
			},
		},
		"coordinator.v1.ReleaseGroupRequest": {
			func() proto.Message { return &coordinatorv1.ReleaseGroupRequest{Holder: "h", Leases: groupLeases(1)} },
			releaseGroup,
		},
		"coordinator.v1.GroupLease": {
			func() proto.Message { return &coordinatorv1.ReleaseGroupRequest{Holder: "h", Leases: groupLeases(1)} },
			releaseGroup,
		},
		// A valid session id that names no session is refused, but not as
		// invalid: FailedPrecondition, SESSION_NOT_FOUND.
		"coordinator.v1.CreateSessionRequest": {
			func() proto.Message { return &coordinatorv1.CreateSessionRequest{Ttl: ttl} },
			func(m proto.Message) error {
				_, err := c.client.CreateSession(ctx, m.(*coordinatorv1.CreateSessionRequest))
				return err
			},
		},
		"coordinator.v1.RenewSessionRequest": {
			func() proto.Message { return &coordinatorv1.RenewSessionRequest{SessionId: fresh()} },
			func(m proto.Message) error {
				_, err := c.client.RenewSession(ctx, m.(*coordinatorv1.RenewSessionRequest))
				return err
			},
		},
		"coordinator.v1.CloseSessionRequest": {
			func() proto.Message { return &coordinatorv1.CloseSessionRequest{SessionId: fresh()} },
			func(m proto.Message) error {
				_, err := c.client.CloseSession(ctx, m.(*coordinatorv1.CloseSessionRequest))
				return err
			},
		},
		"coordinator.v1.DescribeSessionRequest": {
			func() proto.Message { return &coordinatorv1.DescribeSessionRequest{SessionId: fresh()} },
			func(m proto.Message) error {
				_, err := c.client.DescribeSession(ctx, m.(*coordinatorv1.DescribeSessionRequest))
				return err
			},
		},
	}

	annotated := 0
	msgs := coordinatorv1.File_coordinator_v1_coordinator_proto.Messages()
	for i := range msgs.Len() {
		md := msgs.Get(i)
		for j := range md.Fields().Len() {
			fd := md.Fields().Get(j)
			rules := server.FieldRules(fd)
			if rules == nil {
				continue
			}
			annotated++
			if md.FullName() == "coordinator.v1.StreamRequest" {
				continue // a bound on operations per message: session_test.go
			}
			req, ok := requests[md.FullName()]
			if !ok {
				t.Errorf("%s has rules, but this test cannot send a %s: add it", fd.FullName(), md.FullName())
				continue
			}
			for _, tc := range fieldCases(fd, rules, cfg.MaxTTL, lists[md.FullName()]) {
				t.Run(fmt.Sprintf("%s/%s", fd.FullName(), tc.what), func(t *testing.T) {
					m := req.valid()
					target, path := m.ProtoReflect(), ""
					if in := within[md.FullName()]; in != nil {
						target, path = in(m)
					}
					if tc.value.IsValid() {
						target.Set(fd, tc.value)
					} else {
						target.Clear(fd)
					}
					err := req.send(m)
					code, reason, field := errorDetails(err)
					want := path + string(fd.Name())
					refused := code == codes.InvalidArgument && reason == "INVALID_FIELD" && field == want
					if tc.invalid && !refused {
						t.Fatalf("%v: %v (reason %q, field %q); want InvalidArgument INVALID_FIELD naming %s", m, err, reason, field, want)
					}
					if !tc.invalid && code == codes.InvalidArgument {
						t.Fatalf("%v: %v; want the value accepted", m, err)
					}
				})
			}
		}
	}
	if annotated < 20 {
		t.Fatalf("only %d annotated fields found: the rules were not read", annotated)
	}
}

type fieldCase struct {
	what    string
	value   protoreflect.Value
	invalid bool
}

// listOf is the value of m's repeated field.
func listOf(m proto.Message, field protoreflect.Name) protoreflect.Value {
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByName(field))
}

// fieldCases are the values at and just past each of a field's limits;
// list makes a repeated field's value of n valid entries.
func fieldCases(fd protoreflect.FieldDescriptor, rules *coordinatorv1.FieldRules, maxTTL time.Duration, list func(n int) protoreflect.Value) []fieldCase {
	var cases []fieldCase
	add := func(what string, v protoreflect.Value, invalid bool) {
		cases = append(cases, fieldCase{what, v, invalid})
	}
	if fd.IsList() {
		if list == nil {
			panic(fmt.Sprintf("%s: a repeated field with rules, and no way to make its entries", fd.FullName()))
		}
		if rules.GetRequired() {
			add("none", protoreflect.Value{}, true)
		}
		if n := int(rules.GetMaxValue()); n > 0 {
			add("at max_value entries", list(n), false)
			add("past max_value entries", list(n+1), true)
		}
		return cases
	}
	str := func(s string) protoreflect.Value { return protoreflect.ValueOfString(s) }
	durv := func(d time.Duration) protoreflect.Value {
		return protoreflect.ValueOfMessage(durationpb.New(d).ProtoReflect())
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		if rules.GetRequired() {
			add("empty", str(""), true)
		}
		if n := int(rules.GetMaxBytes()); n > 0 {
			add("at max_bytes", str(strings.Repeat("a", n)), false)
			add("past max_bytes", str(strings.Repeat("a", n+1)), true)
		}
		switch rules.GetFormat() {
		case coordinatorv1.TextFormat_TEXT_FORMAT_PRINTABLE:
			add("printable", str("host-1 pid 7 é"), false)
			add("control character", str("a\x01b"), true)
		case coordinatorv1.TextFormat_TEXT_FORMAT_NAME:
			add("segments", str("team/job"), false)
			for _, bad := range []string{"/team", "team/", "team//job", "team/./job", "team/../job", "a\nb"} {
				add(fmt.Sprintf("%q", bad), str(bad), true)
			}
		case coordinatorv1.TextFormat_TEXT_FORMAT_NAME_PREFIX:
			for _, good := range []string{"team/", "team/jo", "team/."} {
				add(fmt.Sprintf("%q", good), str(good), false)
			}
			for _, bad := range []string{"/team", "team//", "team/../", "a\nb"} {
				add(fmt.Sprintf("%q", bad), str(bad), true)
			}
		}
	case protoreflect.BytesKind:
		if n := int(rules.GetMaxBytes()); n > 0 {
			add("at max_bytes", protoreflect.ValueOfBytes(make([]byte, n)), false)
			add("past max_bytes", protoreflect.ValueOfBytes(make([]byte, n+1)), true)
		}
	case protoreflect.Uint64Kind:
		if rules.GetRequired() {
			add("zero", protoreflect.ValueOfUint64(0), true)
		}
	case protoreflect.Uint32Kind:
		if n := rules.GetMaxValue(); n > 0 {
			add("zero (the default)", protoreflect.ValueOfUint32(0), false)
			add("at max_value", protoreflect.ValueOfUint32(n), false)
			add("past max_value", protoreflect.ValueOfUint32(n+1), true)
		}
	case protoreflect.Int32Kind:
		if n := int32(rules.GetMaxValue()); n > 0 {
			add("at max_value", protoreflect.ValueOfInt32(n), false)
			add("past max_value (lowered)", protoreflect.ValueOfInt32(n+1), false)
		}
	case protoreflect.MessageKind:
		if rules.GetRequired() {
			add("unset", protoreflect.Value{}, true)
		}
		if lo := time.Duration(rules.GetMinMillis()) * time.Millisecond; lo > 0 {
			add("at min_millis", durv(lo), false)
			add("below min_millis", durv(lo-time.Millisecond), true)
		}
		hi := time.Duration(rules.GetMaxMillis()) * time.Millisecond
		if rules.GetMaxSetting() == "COORDINATOR_MAX_TTL" {
			hi = maxTTL
		} else if rules.GetMaxSetting() != "" {
			panic("no test value for the setting " + rules.GetMaxSetting())
		}
		if hi > 0 {
			add("at max", durv(hi), false)
			add("past max", durv(hi+time.Millisecond), true)
		}
	}
	if len(cases) == 0 {
		panic(fmt.Sprintf("%s: no test case for its rules %v", fd.FullName(), rules))
	}
	return cases
}

// observeOnce opens an Observe stream and returns the error of its first
// message, if any.
func observeOnce(ctx context.Context, c *coordinator, req *coordinatorv1.ObserveRequest) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.client.Observe(ctx, req)
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// sessionOnce runs op alone on an operation stream of its own and returns its
// result's error.
func sessionOnce(t *testing.T, ctx context.Context, c *coordinator, op *coordinatorv1.StreamOperation) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := openOpStream(t, ctx, c)
	s.send(op)
	s.await(op.GetId())
	return resultError(s.got[op.GetId()])
}
