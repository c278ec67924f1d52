// Package readme reads the sections of the repository's README.md and
// docs/*.md that tests replay, so that every command a reader copies is one
// a test ran, and finds the links of a markdown file, so that a test can
// check that each one leads somewhere.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package readme
