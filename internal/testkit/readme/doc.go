// Package readme reads the sections of the repository's README.md that
// tests replay, so that every command a reader copies is one a test ran.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package readme
