// Package charttest holds no code: its test renders the Helm chart in
// ../coordinator with helm template (the helm pinned in tools/go.mod, run as
// go tool; $HELM overrides it), with the default values and with each file
// of testdata/, and decodes every manifest strictly into the Kubernetes API
// types (k8s.io/api, and the Prometheus Operator's for ServiceMonitor and
// PrometheusRule): an unknown or misspelt field, a duplicate key or a value
// of the wrong type fails, as the API server would refuse it. Then it checks
// what the chart promises: probes, security context, Secrets, the hook Job,
// the memory store's single replica.
//
// It is a module of its own, so that k8s.io, the Prometheus Operator's types
// and helm stay out of the coordinator's module graph; make lint runs it
// (helm takes minutes to compile the first time; make test never needs it).
package charttest
