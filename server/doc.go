// Package server is the coordinator's gRPC service: it validates requests,
// calls the store, and maps the store's answers to responses and status
// codes. The lease rules themselves live in the store and its scripts.
//
// # Layering
//
// The service layer. It owns the gRPC handlers and what they need: request
// validation against the proto's rules, waiting lines, observers, the
// operation streams, status codes and metrics. Of this module it
// imports only the store interface (server/store), the service's two leaves
// (server/errinfo, server/streamops), the generated API (gen) and the leaves
// in internal/. It never imports a store implementation, its middleware
// (server/access, server/limits, server/protocodec), the coordinator process
// (coordinatord), the SDK or Redis: the process wires it to a store and to the
// middleware. Its tests here serve a bare Service over a store; the tests
// through a whole coordinator are in coordinatord. layering_test.go, at the
// module root, checks all of this.
package server
