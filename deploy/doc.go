// Package deploy holds no code: it is where the deployment artifacts live,
// and its tests check them against the binaries.
//
//   - helm/coordinator: the Helm chart, with files/alerts.yaml (the
//     Prometheus rules) and files/grafana-dashboard.json (the dashboard);
//     helm/charttest, a module of its own that make lint runs, renders it
//     and decodes every manifest strictly into the Kubernetes API types.
//   - image: the image's user and group files (the Dockerfile is at the
//     repository root).
//
// The tests here, in make test: the version in the VERSION file, Chart.yaml
// and the Dockerfile agree; and, when podman is installed, make image's
// image is built and checked by its content: its configuration, its files,
// and its binaries started from the exported filesystem against a Redis. A
// missing podman skips that test, except in CI (CI set), where it fails.
//
// It imports nothing of this module but in tests, which may use the test
// kits (see layering_test.go).
package deploy
