// Package deploy holds no code: it is where the deployment artifacts live,
// and its tests check them against the binaries.
//
//   - helm/coordinator: the Helm chart, with files/alerts.yaml (the
//     Prometheus rules) and files/grafana-dashboard.json (the dashboard);
//     helm/charttest, a module of its own that make lint runs, renders it
//     and decodes every manifest strictly into the Kubernetes API types.
//   - alerts_test.yaml: promtool's unit tests of the rules.
//   - image: the image's user and group files (the Dockerfile is at the
//     repository root).
//
// The tests here, in make test: the version in the VERSION file, Chart.yaml
// and the Dockerfile agree; every metric and label the dashboard's queries
// and the alert rules name is exported by a real coordinator and a real
// housekeeper, scraped live; promtool checks and unit-tests the rules, and
// parses every dashboard query (when promtool is installed). make
// test-image, which make test runs after the other tests, builds make
// image's image (with podman) and checks it by its content: its
// configuration, its files, and its coordinator started from the exported
// filesystem against a Redis, serving. CI installs promtool and podman, and
// there a missing tool fails instead of skipping.
//
// It imports nothing of this module but in tests, which may use the test
// kits (see layering_test.go).
package deploy
