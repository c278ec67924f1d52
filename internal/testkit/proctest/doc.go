// Package proctest runs the module's binaries as child processes in tests:
// it builds a binary once per test binary, starts it with the environment a
// test gives, keeps its log (stderr) and waits for lines in it, and signals,
// kills and waits for it.
//
// It is a test kit (internal/testkit): only tests import it (cmd/coordinator's,
// cmd/housekeeper's and deploy's), and it imports nothing of this module.
package proctest
