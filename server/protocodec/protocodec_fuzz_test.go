package protocodec

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// requestTypes are the messages the server decodes: the input of every
// method of the service, in declaration order.
func requestTypes(tb testing.TB) []protoreflect.MessageType {
	tb.Helper()
	methods := coordinatorv1.File_coordinator_v1_coordinator_proto.Services().ByName("Coordinator").Methods()
	var out []protoreflect.MessageType
	seen := map[protoreflect.FullName]bool{}
	for i := range methods.Len() {
		in := methods.Get(i).Input()
		if seen[in.FullName()] {
			continue
		}
		seen[in.FullName()] = true
		mt, err := protoregistry.GlobalTypes.FindMessageByName(in.FullName())
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, mt)
	}
	if len(out) < 10 {
		tb.Fatalf("only %d request types found", len(out))
	}
	return out
}

// fuzzInvalidField stands in for the service's InvalidField: an
// InvalidArgument whose message starts with the field.
func fuzzInvalidField(field, reason string) error {
	return status.Error(codes.InvalidArgument, field+": "+reason)
}

// FuzzUnmarshal feeds arbitrary bytes to the codec as each request type.
// Unmarshal never fails nor panics for a request; what proto.Unmarshal
// accepts is decoded exactly as it decodes it, with no note; what it refuses
// leaves the message empty with one note, an InvalidArgument that names a
// field of the message (or the message as a whole), taken once; no note is
// left behind. diagnose never blames a message proto.Unmarshal accepts.
func FuzzUnmarshal(f *testing.F) {
	types := requestTypes(f)
	mustMarshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	index := func(m proto.Message) uint8 {
		for i, mt := range types {
			if mt.Descriptor().FullName() == m.ProtoReflect().Descriptor().FullName() {
				return uint8(i)
			}
		}
		f.Fatalf("%T is no request type", m)
		return 0
	}
	acquire := &coordinatorv1.TryAcquireRequest{Name: "team-a/job", Holder: "h", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Second)}
	session := &coordinatorv1.StreamRequest{Operations: []*coordinatorv1.StreamOperation{
		{Id: 1, Operation: &coordinatorv1.StreamOperation_Acquire{Acquire: acquire}},
		{Id: 2, Operation: &coordinatorv1.StreamOperation_Cancel{Cancel: 1}},
	}}
	// A session whose one acquire has a holder that is not UTF-8.
	badOp := protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3), 2, protowire.BytesType), str(nil, 2, "\xff"))
	badStream := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), badOp)
	for _, seed := range []struct {
		msg proto.Message
		b   []byte
	}{
		{acquire, mustMarshal(acquire)},
		{session, mustMarshal(session)},
		{&coordinatorv1.StreamRequest{}, badStream},
		{&coordinatorv1.CampaignRequest{}, mustMarshal(&coordinatorv1.CampaignRequest{Election: "e", Candidate: "c", Value: []byte{0xff, 0}, Ttl: durationpb.New(time.Second)})},
		{&coordinatorv1.ListRequest{}, mustMarshal(&coordinatorv1.ListRequest{Prefix: "team-a/", PageSize: -1, PageToken: "!"})},
		{&coordinatorv1.TryAcquireRequest{}, nil},
		{&coordinatorv1.TryAcquireRequest{}, str(nil, 2, "\xff")},                                                                       // holder not UTF-8
		{&coordinatorv1.TryAcquireRequest{}, append(protowire.AppendTag(nil, 99, protowire.BytesType), 5)},                              // unknown field cut short
		{&coordinatorv1.TryAcquireRequest{}, protowire.AppendTag(nil, 3, protowire.StartGroupType)},                                     // group never ended
		{&coordinatorv1.TryAcquireRequest{}, protowire.AppendTag(nil, 0, protowire.VarintType)},                                         // field number 0
		{&coordinatorv1.TryAcquireRequest{}, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7)},              // name as a varint
		{&coordinatorv1.TryAcquireRequest{}, protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), str(nil, 1, "x"))}, // ttl.seconds as bytes
		{&coordinatorv1.RenewRequest{}, []byte{0x80}},                                                                                   // a tag cut short
		{&coordinatorv1.StreamRequest{}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},                      // a tag that overflows
	} {
		f.Add(index(seed.msg), seed.b)
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		mt := types[int(which)%len(types)]
		c := New(fuzzInvalidField)
		got := mt.New().Interface()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
			t.Fatalf("Unmarshal(%x) as %s returned %v; a request that cannot be decoded is noted instead", b, mt.Descriptor().FullName(), err)
		}
		want := mt.New().Interface()
		wantErr := proto.Unmarshal(b, want)
		noted := c.Err(got)
		if again := c.Err(got); again != nil {
			t.Fatalf("the note was kept after it was taken: %v", again)
		}
		if n := c.pending.Load(); n != 0 {
			t.Fatalf("%d notes left behind", n)
		}
		md := mt.Descriptor()
		if wantErr == nil {
			if noted != nil {
				t.Fatalf("%x decodes as %s, but the codec noted %v", b, md.FullName(), noted)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%x decoded as %v; proto.Unmarshal decodes %v", b, got, want)
			}
			if field, reason := diagnose(md, b, ""); field != "" {
				t.Fatalf("diagnose blames %q (%s) in %x, which decodes", field, reason, b)
			}
			return
		}
		if noted == nil {
			t.Fatalf("%x does not decode as %s (%v), but nothing was noted", b, md.FullName(), wantErr)
		}
		if st := status.Convert(noted); st.Code() != codes.InvalidArgument {
			t.Fatalf("noted %v; want InvalidArgument", noted)
		}
		if proto.Size(got) != 0 {
			t.Fatalf("an undecodable request was left with %v", got)
		}
		if field, _ := diagnose(md, b, ""); field != "" {
			if !strings.HasPrefix(status.Convert(noted).Message(), field+": ") {
				t.Fatalf("noted %v; want the error of field %q", noted, field)
			}
			if !isFieldPath(md, field) {
				t.Fatalf("diagnose names %q, which is no field path of %s", field, md.FullName())
			}
		}
	})
}

// isFieldPath reports whether path names a field of md, nested messages
// joined with ".", and unknown fields as "field N" (the last element only:
// an unknown field's contents are not read).
func isFieldPath(md protoreflect.MessageDescriptor, path string) bool {
	elems := strings.Split(path, ".")
	for i, e := range elems {
		if strings.HasPrefix(e, "field ") {
			return i == len(elems)-1
		}
		fd := md.Fields().ByName(protoreflect.Name(e))
		if fd == nil {
			return false
		}
		if i < len(elems)-1 {
			if fd.Message() == nil {
				return false
			}
			md = fd.Message()
		}
	}
	return true
}
