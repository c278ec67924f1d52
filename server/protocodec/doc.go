// Package protocodec is the server's proto codec, which reports a request
// that cannot be decoded (invalid UTF-8 in a string field, a truncated or
// malformed message) as InvalidArgument naming the field, instead of the
// Internal status gRPC gives any codec error.
//
// gRPC turns a codec's Unmarshal error into Internal before any interceptor
// runs, so the codec does not fail: it leaves the message empty and notes
// why, and the interceptors, first in the chain, answer with the note. Every
// request passes them, so every note is taken.
//
// It is middleware: the process installs it as the server codec, with its
// interceptors first in the chains. It imports nothing of this module: New is
// given the service's error for a bad field.
package protocodec
