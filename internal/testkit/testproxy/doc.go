// Package testproxy is a TCP proxy for tests that inject network faults
// between a client and a live server: connections cut at once, connections
// that stay open but carry nothing (a stalled network, a half-open
// connection), and a target that moves (a failover behind one address).
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package testproxy
