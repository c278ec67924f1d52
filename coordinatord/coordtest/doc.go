// Package coordtest runs real coordinators for tests: the whole server on a
// loopback listener, which a test may stop abruptly and start again on the
// same address.
//
// It is a test kit: only tests import it (the SDK's, the service's, coordctl's
// and the housekeeper's). It imports the process (coordinatord) and
// internal/testkit/redistest.
package coordtest
