package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const (
	chart   = "../coordinator"
	release = "rel"
	ns      = "coord"
)

// object is one rendered manifest, decoded into its API type.
type object struct {
	source string // the template it came from
	kind   string
	name   string
	meta   *metav1.ObjectMeta
	obj    any
}

// newObject returns an empty object of the API type of apiVersion and kind.
func newObject(apiVersion, kind string) (any, *metav1.ObjectMeta) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		return o, &o.ObjectMeta
	case "v1 Service":
		o := &corev1.Service{}
		return o, &o.ObjectMeta
	case "v1 ServiceAccount":
		o := &corev1.ServiceAccount{}
		return o, &o.ObjectMeta
	case "v1 Secret":
		o := &corev1.Secret{}
		return o, &o.ObjectMeta
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		return o, &o.ObjectMeta
	case "v1 PersistentVolumeClaim":
		o := &corev1.PersistentVolumeClaim{}
		return o, &o.ObjectMeta
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		return o, &o.ObjectMeta
	case "batch/v1 Job":
		o := &batchv1.Job{}
		return o, &o.ObjectMeta
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o := &monitoringv1.ServiceMonitor{}
		return o, &o.ObjectMeta
	case "monitoring.coreos.com/v1 PrometheusRule":
		o := &monitoringv1.PrometheusRule{}
		return o, &o.ObjectMeta
	}
	return nil, nil
}

// helmCommand is the helm to run: $HELM, or the one pinned in tools/go.mod.
func helmCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		f := strings.Fields(h)
		return exec.Command(f[0], append(f[1:], args...)...)
	}
	mod, err := filepath.Abs("../../../tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command("go", append([]string{"tool", "-modfile=" + mod, "helm"}, args...)...)
}

// template runs helm template on the chart with args (-f, --set…).
func template(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := helmCommand(t, append([]string{"template", release, chart, "--namespace", ns}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm template %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: (\S+)`)

// render renders the chart with args and decodes every manifest strictly.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		source := "?"
		if m := sourceLine.FindStringSubmatch(doc); m != nil {
			source = m[1]
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Errorf("%s: %v", source, err)
			continue
		}
		obj, meta := newObject(tm.APIVersion, tm.Kind)
		if obj == nil {
			t.Errorf("%s: a %s %s, which this test does not know: add its API type to newObject", source, tm.APIVersion, tm.Kind)
			continue
		}
		// Unknown fields and duplicate keys are errors, as they are to
		// kubectl apply --validate=strict.
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s: %s does not decode strictly: %v", source, tm.Kind, err)
			continue
		}
		objs = append(objs, object{source: source, kind: tm.Kind, name: meta.Name, meta: meta, obj: obj})
	}
	if len(objs) == 0 {
		t.Fatalf("helm template %v rendered nothing", args)
	}
	checkNames(t, objs)
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// checkNames checks what the API server checks of names and labels, and
// that each object carries the release's labels.
func checkNames(t *testing.T, objs []object) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.kind + "/" + o.name
		if seen[key] {
			t.Errorf("%s: a second %s", o.source, key)
		}
		seen[key] = true
		check := validation.IsDNS1123Subdomain
		if o.kind == "Service" {
			check = validation.IsDNS1035Label
		}
		for _, msg := range check(o.name) {
			t.Errorf("%s: %s name %q: %s", o.source, o.kind, o.name, msg)
		}
		for k, v := range o.meta.Labels {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				t.Errorf("%s: label %s=%s: %s", o.source, k, v, msg)
			}
		}
		if o.meta.Labels["app.kubernetes.io/instance"] != release || o.meta.Labels["app.kubernetes.io/name"] != "coordinator" {
			t.Errorf("%s: %s lacks the release's labels: %v", o.source, key, o.meta.Labels)
		}
	}
}

// kinds counts the objects of each kind.
func kinds(objs []object) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.kind]++
	}
	return n
}

func checkKinds(t *testing.T, objs []object, want map[string]int) {
	t.Helper()
	if got := kinds(objs); !equalMaps(got, want) {
		t.Errorf("rendered %v, want %v", got, want)
	}
}

func equalMaps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// get returns the object of type T named name.
func get[T any](t *testing.T, objs []object, name string) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.obj.(T); ok && o.name == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %q among %v", zero, name, names(objs))
	return zero
}

func names(objs []object) []string {
	var n []string
	for _, o := range objs {
		n = append(n, o.kind+"/"+o.name)
	}
	return n
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func envValue(t *testing.T, c corev1.Container, name, want string) {
	t.Helper()
	if e := env(c, name); e == nil || e.Value != want {
		t.Errorf("container %s: %s = %+v, want %q", c.Name, name, e, want)
	}
}

func envSecret(t *testing.T, c corev1.Container, name, secret, key string) {
	t.Helper()
	e := env(c, name)
	if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != secret || e.ValueFrom.SecretKeyRef.Key != key {
		t.Errorf("container %s: %s = %+v, want it from Secret %s, key %s", c.Name, name, e, secret, key)
	}
}

func volume(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// checkHardened checks the security settings every pod of the chart has.
func checkHardened(t *testing.T, what string, spec corev1.PodSpec) {
	t.Helper()
	p := spec.SecurityContext
	if p == nil || p.RunAsNonRoot == nil || !*p.RunAsNonRoot || p.RunAsUser == nil || *p.RunAsUser != 65532 ||
		p.SeccompProfile == nil || p.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod security context %+v, want non-root 65532 and the runtime's seccomp profile", what, p)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: a service account token is mounted", what)
	}
	for _, c := range spec.Containers {
		s := c.SecurityContext
		if s == nil || s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem ||
			s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation ||
			s.Capabilities == nil || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: container %s security context %+v, want a read-only root, no escalation, every capability dropped", what, c.Name, s)
		}
	}
}

// checkSelects checks that selector selects the pods of template.
func checkSelects(t *testing.T, what string, selector map[string]string, template corev1.PodTemplateSpec) {
	t.Helper()
	if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(template.Labels)) {
		t.Errorf("%s: selector %v does not select the pods %v", what, selector, template.Labels)
	}
}

// chartVersion is Chart.yaml's appVersion.
func chartVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml: appVersion %q, %v", c.AppVersion, err)
	}
	return c.AppVersion
}

func TestDefaultValues(t *testing.T) {
	objs := render(t)
	checkKinds(t, objs, map[string]int{"Deployment": 1, "Service": 2, "PodDisruptionBudget": 1, "ServiceAccount": 1, "Job": 1})
	d := get[*appsv1.Deployment](t, objs, "rel-coordinator")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("replicas %v, strategy %v; want 3 rolling", d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	checkSelects(t, "Deployment", d.Spec.Selector.MatchLabels, d.Spec.Template)
	spec := d.Spec.Template.Spec
	checkHardened(t, "coordinator", spec)
	c := spec.Containers[0]
	if want := "coordinator:" + chartVersion(t); c.Image != want {
		t.Errorf("image %q, want %q: the image tag defaults to the chart's appVersion", c.Image, want)
	}
	if len(c.Command) != 0 || len(c.Args) != 0 {
		t.Errorf("the coordinator runs the image's entrypoint; got command %v, args %v", c.Command, c.Args)
	}
	// Native gRPC probes: readiness on the whole server (it follows the
	// store), liveness on the liveness service.
	if r := c.ReadinessProbe; r == nil || r.GRPC == nil || r.GRPC.Port != 7400 || (r.GRPC.Service != nil && *r.GRPC.Service != "") {
		t.Errorf("readiness probe %+v, want gRPC on 7400, the server's health", r)
	}
	if l := c.LivenessProbe; l == nil || l.GRPC == nil || l.GRPC.Port != 7400 || l.GRPC.Service == nil || *l.GRPC.Service != "liveness" {
		t.Errorf("liveness probe %+v, want gRPC on 7400, service liveness", l)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want a CPU request and a memory limit", c.Resources)
	}
	envValue(t, c, "COORDINATOR_LISTEN", ":7400")
	envValue(t, c, "COORDINATOR_METRICS_LISTEN", ":7401")
	envValue(t, c, "COORDINATOR_STORE", "redis")
	envSecret(t, c, "COORDINATOR_REDIS_URL", "coordinator-redis", "url")
	if env(c, "COORDINATOR_REDIS_NEW_STORE") != nil {
		t.Error("the Deployment sets COORDINATOR_REDIS_NEW_STORE: the init-store hook prepares a new Redis instead")
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			t.Errorf("tracing is off by default, yet the coordinator gets %s", e.Name)
		}
	}
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		!labels.SelectorFromSet(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("affinity %+v, want a preferred anti-affinity of the coordinators to each other", spec.Affinity)
	}

	svc := get[*corev1.Service](t, objs, "rel-coordinator")
	headless := get[*corev1.Service](t, objs, "rel-coordinator-headless")
	for _, s := range []*corev1.Service{svc, headless} {
		checkSelects(t, "Service "+s.Name, s.Spec.Selector, d.Spec.Template)
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.String() }) {
				t.Errorf("Service %s: port %s targets %q, which the container does not name", s.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service: clusterIP %q, publishNotReadyAddresses %v; want None and only ready pods", headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}

	pdb := get[*policyv1.PodDisruptionBudget](t, objs, "rel-coordinator")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		!labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget %+v, want at most one coordinator down, of these pods", pdb.Spec)
	}

	job := get[*batchv1.Job](t, objs, "rel-coordinator-init-store")
	if job.Annotations["helm.sh/hook"] != "pre-install" || !strings.Contains(job.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Errorf("init-store Job annotations %v, want a pre-install hook", job.Annotations)
	}
	js := job.Spec.Template.Spec
	checkHardened(t, "init-store", js)
	jc := js.Containers[0]
	if !slices.Equal(jc.Args, []string{"init-store"}) || jc.Image != c.Image || js.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("init-store Job: args %v, image %s, restart %s; want init-store, the coordinator's image, never", jc.Args, jc.Image, js.RestartPolicy)
	}
	if js.ServiceAccountName != "" {
		t.Errorf("init-store Job runs as %q, which a pre-install hook runs before it exists", js.ServiceAccountName)
	}
	envValue(t, jc, "COORDINATOR_STORE", "redis")
	envSecret(t, jc, "COORDINATOR_REDIS_URL", "coordinator-redis", "url")
	envValue(t, jc, "COORDINATOR_REDIS_KEY_PREFIX", "coordinator")
}

func TestFullValues(t *testing.T) {
	objs := render(t, "-f", "testdata/full.yaml")
	checkKinds(t, objs, map[string]int{
		"Deployment": 2, "Service": 3, "PodDisruptionBudget": 2, "ServiceAccount": 1, "Secret": 1,
		"ConfigMap": 1, "PrometheusRule": 1, "ServiceMonitor": 2, "Job": 1,
	})

	d := get[*appsv1.Deployment](t, objs, "rel-coordinator")
	spec := d.Spec.Template.Spec
	checkHardened(t, "coordinator", spec)
	c := spec.Containers[0]
	// TLS: the probes cannot speak it, and go to the plaintext health port.
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != 7402 {
			t.Errorf("probe %+v, want gRPC on the health port 7402", p)
		}
	}
	envValue(t, c, "COORDINATOR_HEALTH_LISTEN", ":7402")
	envValue(t, c, "COORDINATOR_TLS_CERT", "/etc/coordinator/tls/tls.crt")
	envValue(t, c, "COORDINATOR_TLS_CLIENT_CA", "/etc/coordinator/client-ca/ca.crt")
	envValue(t, c, "COORDINATOR_ACCESS_FILE", "/etc/coordinator/access/access")
	envValue(t, c, "COORDINATOR_MAX_TTL", "10m")
	envValue(t, c, "COORDINATOR_REDIS_KEY_PREFIX", "team-a")
	envSecret(t, c, "COORDINATOR_AUTH_TOKEN", "coordinator-admin", "token")
	envSecret(t, c, "COORDINATOR_REDIS_URL", "coordinator-redis", "redis-url")
	if e := env(c, "GOMAXPROCS"); e == nil || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil {
		t.Errorf("extraEnv GOMAXPROCS = %+v", e)
	}
	// Tracing: the standard variables, the resource naming the pod, which
	// Kubernetes expands only from a variable defined before it.
	envValue(t, c, "OTEL_TRACES_EXPORTER", "otlp")
	envValue(t, c, "OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability.svc:4317")
	envValue(t, c, "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	envValue(t, c, "OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	envValue(t, c, "OTEL_TRACES_SAMPLER_ARG", "0.25")
	envSecret(t, c, "OTEL_EXPORTER_OTLP_HEADERS", "otlp-headers", "headers")
	envValue(t, c, "OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name="+ns+",k8s.deployment.name=rel-coordinator,deployment.environment.name=test")
	pod := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "K8S_POD_NAME" })
	if pod < 0 || c.Env[pod].ValueFrom == nil || c.Env[pod].ValueFrom.FieldRef == nil || c.Env[pod].ValueFrom.FieldRef.FieldPath != "metadata.name" ||
		pod > slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "OTEL_RESOURCE_ATTRIBUTES" }) {
		t.Errorf("K8S_POD_NAME: want the pod's name, defined before OTEL_RESOURCE_ATTRIBUTES; env %+v", c.Env)
	}
	for vol, secret := range map[string]string{"tls": "coordinator-tls", "client-ca": "coordinator-client-ca", "access": "rel-coordinator-access"} {
		if v := volume(spec, vol); v == nil || v.Secret == nil || v.Secret.SecretName != secret {
			t.Errorf("volume %s = %+v, want Secret %s", vol, v, secret)
		}
	}
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v, want a required anti-affinity", spec.Affinity)
	}
	if spec.ServiceAccountName != "coordinator-sa" || len(spec.Tolerations) != 1 || len(spec.TopologySpreadConstraints) != 1 || spec.PriorityClassName == "" {
		t.Errorf("pod spec %+v lacks the values' service account, tolerations, spread or priority", spec)
	}

	secret := get[*corev1.Secret](t, objs, "rel-coordinator-access")
	if got := secret.StringData["access"]; !strings.Contains(got, "hk-token              deckard/") || strings.HasSuffix(got, "\n\n") {
		t.Errorf("access Secret holds %q", got)
	}
	// A change of the rules rolls the pods: the checksum follows them.
	sum := d.Spec.Template.Annotations["checksum/access-file"]
	again := get[*appsv1.Deployment](t, render(t, "-f", "testdata/full.yaml"), "rel-coordinator").Spec.Template.Annotations["checksum/access-file"]
	changed := get[*appsv1.Deployment](t, render(t, "-f", "testdata/full.yaml", "--set", "auth.accessFile.rules=tok-b team-b/"), "rel-coordinator").Spec.Template.Annotations["checksum/access-file"]
	if sum == "" || sum != again || sum == changed {
		t.Errorf("checksum/access-file %q, %q on the same rules, %q on others: want it set, stable, and changed by the rules", sum, again, changed)
	}

	hk := get[*appsv1.Deployment](t, objs, "rel-coordinator-housekeeper")
	checkSelects(t, "housekeeper Deployment", hk.Spec.Selector.MatchLabels, hk.Spec.Template)
	if labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(hk.Spec.Template.Labels)) {
		t.Error("the coordinator's selector selects the housekeeper's pods")
	}
	hs := hk.Spec.Template.Spec
	checkHardened(t, "housekeeper", hs)
	h := hs.Containers[0]
	if !slices.Equal(h.Command, []string{"/usr/local/bin/housekeeper"}) || h.Image != "registry.example.com/coordinator:0.1.0-test" {
		t.Errorf("housekeeper: command %v, image %s; want the housekeeper binary of the same image", h.Command, h.Image)
	}
	envValue(t, h, "HOUSEKEEPER_COORDINATOR_ADDR", "rel-coordinator:7400")
	envValue(t, h, "HOUSEKEEPER_LEASE_TTL", "2s")
	envValue(t, h, "HOUSEKEEPER_LEASE_NAMESPACE", "team-a")
	envValue(t, h, "HOUSEKEEPER_PREFIX", "deckard_v1")
	envValue(t, h, "HOUSEKEEPER_METRICS_LISTEN", ":7402")
	envValue(t, h, "HOUSEKEEPER_PARALLELISM", "8")
	envValue(t, h, "HOUSEKEEPER_COORDINATOR_TLS", "true")
	envValue(t, h, "HOUSEKEEPER_COORDINATOR_TLS_CA", "/etc/housekeeper/coordinator-ca/ca.crt")
	envValue(t, h, "HOUSEKEEPER_COORDINATOR_TLS_CERT", "/etc/housekeeper/client-cert/tls.crt")
	envSecret(t, h, "HOUSEKEEPER_REDIS_URL", "deckard-redis", "url")
	envSecret(t, h, "HOUSEKEEPER_STORAGE_URI", "deckard-mongodb", "uri")
	envValue(t, h, "HOUSEKEEPER_MONGO_DATABASE", "deckard-prod")
	envValue(t, h, "HOUSEKEEPER_MONGO_COLLECTION", "queue")
	envSecret(t, h, "HOUSEKEEPER_COORDINATOR_TOKEN", "housekeeper-token", "token")
	if env(h, "HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN") != nil {
		t.Error("the housekeeper sends its token over plaintext although TLS is on")
	}
	envValue(t, h, "OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability.svc:4317")
	envValue(t, h, "OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name="+ns+",k8s.deployment.name=rel-coordinator-housekeeper,deployment.environment.name=test")
	if e := env(h, "HOUSEKEEPER_INSTANCE_ID"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("HOUSEKEEPER_INSTANCE_ID = %+v, want the pod's name", e)
	}
	if v := volume(hs, "coordinator-ca"); v == nil || v.Secret == nil || v.Secret.SecretName != "coordinator-ca" {
		t.Errorf("housekeeper CA volume %+v", v)
	}
	if p := h.LivenessProbe; p == nil || p.TCPSocket == nil || p.TCPSocket.Port.String() != "metrics" {
		t.Errorf("housekeeper liveness probe %+v, want its metrics port", p)
	}

	// The rules are files/alerts.yaml's, both groups with the housekeeper.
	rule := get[*monitoringv1.PrometheusRule](t, objs, "rel-coordinator")
	want := alertFile(t)
	if got, _ := json.Marshal(rule.Spec.Groups); !jsonEqual(t, got, want) {
		t.Errorf("PrometheusRule groups differ from files/alerts.yaml:\n%s\nwant\n%s", got, want)
	}
	coordOnly := get[*monitoringv1.PrometheusRule](t, render(t, "--set", "metrics.prometheusRule.enabled=true"), "rel-coordinator")
	if len(coordOnly.Spec.Groups) != 1 || coordOnly.Spec.Groups[0].Name != "coordinator" {
		t.Errorf("without the housekeeper, the PrometheusRule has groups %v, want the coordinator's alone", coordOnly.Spec.Groups)
	}

	for _, sm := range []struct{ monitor, service string }{{"rel-coordinator", "rel-coordinator"}, {"rel-coordinator-housekeeper", "rel-coordinator-housekeeper"}} {
		m := get[*monitoringv1.ServiceMonitor](t, objs, sm.monitor)
		s := get[*corev1.Service](t, objs, sm.service)
		if !labels.SelectorFromSet(m.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) || len(m.Spec.Endpoints) != 1 ||
			!slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == m.Spec.Endpoints[0].Port }) {
			t.Errorf("ServiceMonitor %s (%+v) does not scrape the metrics port of Service %s", sm.monitor, m.Spec, sm.service)
		}
	}

	cm := get[*corev1.ConfigMap](t, objs, "rel-coordinator-dashboard")
	dashboard, err := os.ReadFile(filepath.Join(chart, "files/grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(t, []byte(cm.Data["coordinator.json"]), dashboard) || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap: labels %v, its JSON differs from files/grafana-dashboard.json", cm.Labels)
	}
}

// alertFile is files/alerts.yaml's groups, as JSON.
func alertFile(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chart, "files/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		t.Fatalf("files/alerts.yaml: %v", err)
	}
	out, _ := json.Marshal(f.Groups)
	return out
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %.200s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %.200s", err, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func TestMemoryStore(t *testing.T) {
	for _, tc := range []struct {
		values string
		pvc    bool
	}{{"testdata/memory.yaml", true}, {"testdata/memory-ephemeral.yaml", false}} {
		t.Run(tc.values, func(t *testing.T) {
			objs := render(t, "-f", tc.values)
			want := map[string]int{"Deployment": 1, "Service": 2, "ServiceAccount": 1}
			if tc.pvc {
				want["PersistentVolumeClaim"] = 1
			}
			// No PodDisruptionBudget for a single replica (it would block
			// every drain), no init-store Job (nothing to prepare).
			checkKinds(t, objs, want)
			d := get[*appsv1.Deployment](t, objs, "rel-coordinator")
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("replicas %v, strategy %v; want one coordinator, replaced by Recreate", d.Spec.Replicas, d.Spec.Strategy.Type)
			}
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]
			envValue(t, c, "COORDINATOR_STORE", "memory")
			envValue(t, c, "COORDINATOR_STATE_DIR", "/var/lib/coordinator")
			if env(c, "COORDINATOR_REDIS_URL") != nil {
				t.Error("the memory store is given a Redis URL")
			}
			v := volume(spec, "state")
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "state" && m.MountPath == "/var/lib/coordinator" }) || v == nil {
				t.Fatalf("no state volume mounted at /var/lib/coordinator: %+v, %+v", c.VolumeMounts, spec.Volumes)
			}
			if !tc.pvc {
				if v.EmptyDir == nil {
					t.Errorf("state volume %+v, want an emptyDir", v)
				}
				return
			}
			pvc := get[*corev1.PersistentVolumeClaim](t, objs, "rel-coordinator-state")
			if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
				t.Errorf("state volume %+v, want the claim %s", v, pvc.Name)
			}
			if got := pvc.Spec.Resources.Requests.Storage().String(); got != "2Gi" || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast-ssd" {
				t.Errorf("claim %+v, want 2Gi of fast-ssd", pvc.Spec)
			}
			if pvc.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Error("the state claim is deleted on helm uninstall")
			}
		})
	}
}

func TestALongReleaseNameStillMakesValidNames(t *testing.T) {
	cmd := helmCommand(t, "template", strings.Repeat("r", 53), chart, "-f", "testdata/full.yaml")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	for _, m := range regexp.MustCompile(`(?m)^  name: (\S+)$`).FindAllStringSubmatch(string(raw), -1) {
		for _, msg := range validation.IsDNS1123Label(m[1]) {
			t.Errorf("name %q: %s", m[1], msg)
		}
	}
}

func TestBadValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--set", "store.kind=memory"}, "replicaCount=1"},
		{[]string{"--set", "store.kind=etcd"}, "neither redis nor memory"},
		{[]string{"--set", "store.redis.existingSecret="}, "store.redis.existingSecret"},
		{[]string{"--set", "tls.enabled=true"}, "tls.existingSecret"},
		{[]string{"--set", "auth.accessFile.rules=x,auth.accessFile.existingSecret=y"}, "not both"},
		{[]string{"--set", "housekeeper.enabled=true,housekeeper.coordinatorToken.existingSecret=t"}, "sent over TLS only"},
		{[]string{"--set", "podAntiAffinity=always"}, "podAntiAffinity"},
		{[]string{"--set", "tracing.enabled=true"}, "tracing.endpoint"},
		{[]string{"--set", "tracing.enabled=true,tracing.endpoint=http://c:4317,tracing.protocol=http/json"}, "tracing.protocol"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if _, err := template(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v; want a refusal saying %q", err, tc.says)
			}
		})
	}
}
