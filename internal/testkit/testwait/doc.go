// Package testwait waits in tests for a condition instead of sleeping a
// fixed time: fast when the machine is idle, patient when it is loaded.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package testwait
