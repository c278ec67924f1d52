// Package linearize records what clients of the coordinator did to names
// (acquisitions and releases: when each was called, when it returned, and
// what it answered, or that its outcome is unknown) and checks each name's
// history with porcupine against a model of a lease with fencing: Model,
// whose doc comment argues why a correct store's history always passes.
//
// It is a test kit (internal/testkit): only tests import it, and of this
// module it imports nothing.
package linearize
