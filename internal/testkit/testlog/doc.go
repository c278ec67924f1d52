// Package testlog gives tests a log destination they can read while the
// code under test writes to it from other goroutines.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package testlog
