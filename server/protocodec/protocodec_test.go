package protocodec

import (
	"errors"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

func str(b []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func TestDiagnoseNamesTheFieldThatCannotBeDecoded(t *testing.T) {
	leader := func(inner []byte) []byte { // CampaignResponse.leader (2)
		return protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), 2, protowire.BytesType), inner)
	}
	tests := []struct {
		name   string
		msg    proto.Message
		b      []byte
		field  string
		reason string
	}{
		{"string", &coordinatorv1.TryAcquireRequest{}, str(nil, 2, "\xff"), "holder", "is not valid UTF-8"},
		{"nested string", &coordinatorv1.CampaignResponse{}, leader(str(nil, 2, "\xfe")), "leader.candidate", "is not valid UTF-8"},
		{"unknown field cut short", &coordinatorv1.TryAcquireRequest{}, append(protowire.AppendTag(nil, 99, protowire.BytesType), 5), "field 99", "is malformed: unexpected EOF"},
		{"bytes may hold anything", &coordinatorv1.CampaignRequest{}, protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte{0xff}), "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			field, reason := diagnose(tc.msg.ProtoReflect().Descriptor(), tc.b, "")
			if field != tc.field || reason != tc.reason {
				t.Fatalf("diagnose = %q, %q; want %q, %q", field, reason, tc.field, tc.reason)
			}
		})
	}
}

func TestUnmarshalNotesTheErrorForTheInterceptorOnce(t *testing.T) {
	c := New(func(field, reason string) error { return errors.New(field + " " + reason) })
	var req coordinatorv1.TryAcquireRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(str(nil, 1, "a\xff"))}, &req); err != nil {
		t.Fatalf("Unmarshal failed: %v; it should note the error instead", err)
	}
	if err := c.take(&req); err == nil || err.Error() != "name is not valid UTF-8" {
		t.Fatalf("noted error = %v", err)
	}
	if err := c.take(&req); err != nil {
		t.Fatalf("the note was kept after it was taken: %v", err)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(str(nil, 1, "ok"))}, &req); err != nil || req.GetName() != "ok" || c.take(&req) != nil {
		t.Fatalf("a valid message: %v, %v", &req, err)
	}
}
