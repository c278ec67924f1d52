// Package testcert writes self-signed certificates for tests that serve or
// dial TLS on loopback.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package testcert
