package protocodec

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Codec is a gRPC encoding.CodecV2 for proto messages; install it with
// grpc.ForceServerCodecV2 and its interceptors first in the chains.
type Codec struct {
	base encoding.CodecV2
	// bad maps a message that could not be decoded to its error, until an
	// interceptor takes it; pending counts its entries, so that the common
	// case, no note at all, costs one atomic load per request.
	bad     sync.Map
	pending atomic.Int64
	// InvalidField builds the error of a field that could not be decoded.
	invalidField func(field, reason string) error
}

// New returns a Codec; invalidField builds the error of a named field that
// could not be decoded (the service's InvalidArgument with details).
func New(invalidField func(field, reason string) error) *Codec {
	return &Codec{base: encoding.GetCodecV2(protoenc.Name), invalidField: invalidField}
}

// Name implements encoding.CodecV2: it replaces the proto codec.
func (c *Codec) Name() string { return protoenc.Name }

// Marshal implements encoding.CodecV2.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal implements encoding.CodecV2. A message that cannot be decoded is
// left empty and noted for the interceptors; other failures are returned.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	err := proto.Unmarshal(b, m)
	if err == nil {
		return nil
	}
	proto.Reset(m)
	// Counted before it is stored: a take that sees the entry always sees
	// the count too.
	c.pending.Add(1)
	c.bad.Store(v, c.describe(m.ProtoReflect().Descriptor(), b, err))
	return nil
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case proto.Message:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}

// describe finds which field made a message undecodable.
func (c *Codec) describe(md protoreflect.MessageDescriptor, b []byte, err error) error {
	if field, reason := diagnose(md, b, ""); field != "" {
		return c.invalidField(field, reason)
	}
	return status.Errorf(codes.InvalidArgument, "the request is not a valid %s message: %v", md.FullName(), err)
}

// diagnose walks the wire encoding of a message of type md and returns the
// path of the first field that is malformed or, for a string, not UTF-8.
func diagnose(md protoreflect.MessageDescriptor, b []byte, path string) (field, reason string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return orMessage(path), "is malformed: " + protowire.ParseError(n).Error()
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		name := fieldPath(path, fd, num)
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return name, "is malformed: " + protowire.ParseError(n).Error()
		}
		if fd != nil && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			switch fd.Kind() {
			case protoreflect.StringKind:
				if !utf8.Valid(v) {
					return name, "is not valid UTF-8"
				}
			case protoreflect.MessageKind:
				if field, reason := diagnose(fd.Message(), v, name); field != "" {
					return field, reason
				}
			}
		}
		b = b[n:]
	}
	return "", ""
}

func fieldPath(path string, fd protoreflect.FieldDescriptor, num protowire.Number) string {
	name := fmt.Sprintf("field %d", num)
	if fd != nil {
		name = string(fd.Name())
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

func orMessage(path string) string {
	if path == "" {
		return "" // the message as a whole: no field to name
	}
	return path
}

// Err returns, and forgets, the error that made m undecodable, or nil: for
// an interceptor that answers such requests itself instead of installing
// UnaryServerInterceptor. It must see every request, like that interceptor.
func (c *Codec) Err(m any) error {
	// The note is written by Unmarshal on the goroutine that then runs the
	// interceptors, so a note for m is always seen here.
	if c.pending.Load() == 0 {
		return nil
	}
	if err, ok := c.bad.LoadAndDelete(m); ok {
		c.pending.Add(-1)
		return err.(error)
	}
	return nil
}

// take is Err.
func (c *Codec) take(m any) error { return c.Err(m) }

// UnaryServerInterceptor answers a request that could not be decoded. It
// must come before any interceptor that may refuse a call, so that it sees
// every request.
func (c *Codec) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := c.take(req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor fails the receipt of a message that could not be
// decoded, and ends the stream with that error even when the handler treats
// a failed receive as the end of the stream.
func (c *Codec) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		s := &decodedStream{ServerStream: ss, codec: c}
		err := handler(srv, s)
		if err == nil {
			s.mu.Lock()
			err = s.err
			s.mu.Unlock()
		}
		return err
	}
}

type decodedStream struct {
	grpc.ServerStream
	codec *Codec
	mu    sync.Mutex
	err   error
}

func (s *decodedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.codec.take(m); err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
		return err
	}
	return nil
}
