// Package mongotest gives tests a MongoDB wire-protocol server, FerretDB (a
// stand-in for Deckard's MongoDB, which is not installable here): a shared
// one, which scripts/with-ferretdb.sh (run by make test) starts and names in
// COORDINATOR_TEST_MONGODB_URI, with a database of each test's own on it; or
// private FerretDB processes, from the binary COORDINATOR_TEST_FERRETDB
// names, that a fault-injection test may kill and restart. A test without
// them fails rather than skips, as redistest does for Redis.
//
// FerretDB is not MongoDB: it speaks the wire protocol over SQLite, and
// lacks some operators and all replica-set behaviour.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package mongotest
