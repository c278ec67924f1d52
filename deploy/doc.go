// Package deploy holds no code: it is where the deployment artifacts live,
// and its tests check them against the binaries.
//
//   - image: the image's user and group files (the Dockerfile is at the
//     repository root).
//
// The test here, in make test when podman is installed: make image's image
// is built and checked by its content: its configuration, its files, and
// its binaries started from the exported filesystem against a Redis. A
// missing podman skips it, except in CI (CI set), where it fails.
//
// It imports nothing of this module but in tests, which may use the test
// kits (see layering_test.go).
package deploy
