// Package chart_test checks the Helm chart with the real helm binary:
// lint, the rendered objects (decoded strictly into their Kubernetes
// types, so a misspelt field fails), the values schema, the agreement of
// the rendered injector arguments with the injector's own flags, and
// manifests/install.yaml being the rendering of the defaults.
package chart_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/app"
)

var update = flag.Bool("update", false, "rewrite manifests/install.yaml")

const (
	release   = "tether"
	namespace = "tether-system"
)

// helm returns the helm binary the Makefile built ($TETHER_HELM), or the
// default cache location; it fails (never skips) when there is none.
func helm(t *testing.T) string {
	t.Helper()
	path := os.Getenv("TETHER_HELM")
	if path == "" {
		cache, err := os.UserCacheDir()
		if err == nil {
			path = filepath.Join(cache, "tether", "helm-v3.22.0", "helm")
		}
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		t.Fatalf("helm not found at %q ($TETHER_HELM): run `make helm` to build it from the Go module proxy", path)
	}
	return path
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func render(t *testing.T, sets ...string) string {
	t.Helper()
	args := []string{"template", release, ".", "--namespace", namespace}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objects are the rendered documents, each decoded strictly into its type.
type objects struct {
	deployments  map[string]*appsv1.Deployment
	pdbs         map[string]*policyv1.PodDisruptionBudget
	services     map[string]*corev1.Service
	secrets      map[string]*corev1.Secret
	webhooks     map[string]*admissionregv1.MutatingWebhookConfiguration
	clusterRoles map[string]*rbacv1.ClusterRole
	roles        map[string]*rbacv1.Role
	other        map[string]map[string]any // kind/name → object (cert-manager kinds, bindings…)
}

func decode(t *testing.T, out string) *objects {
	t.Helper()
	o := &objects{
		deployments: map[string]*appsv1.Deployment{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{},
		webhooks:     map[string]*admissionregv1.MutatingWebhookConfiguration{},
		clusterRoles: map[string]*rbacv1.ClusterRole{}, roles: map[string]*rbacv1.Role{}, other: map[string]map[string]any{},
	}
	for _, doc := range strings.Split(out, "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		var tm metav1.TypeMeta
		var om struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		_ = yaml.Unmarshal([]byte(doc), &om)
		name := om.Metadata.Name
		strict := func(v any) {
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s %s does not decode strictly: %v", tm.Kind, name, err)
			}
		}
		switch tm.Kind {
		case "Deployment":
			v := &appsv1.Deployment{}
			strict(v)
			o.deployments[name] = v
		case "PodDisruptionBudget":
			v := &policyv1.PodDisruptionBudget{}
			strict(v)
			o.pdbs[name] = v
		case "Service":
			v := &corev1.Service{}
			strict(v)
			o.services[name] = v
		case "Secret":
			v := &corev1.Secret{}
			strict(v)
			o.secrets[name] = v
		case "MutatingWebhookConfiguration":
			v := &admissionregv1.MutatingWebhookConfiguration{}
			strict(v)
			o.webhooks[name] = v
		case "ClusterRole":
			v := &rbacv1.ClusterRole{}
			strict(v)
			o.clusterRoles[name] = v
		case "Role":
			v := &rbacv1.Role{}
			strict(v)
			o.roles[name] = v
		case "ClusterRoleBinding":
			strict(&rbacv1.ClusterRoleBinding{})
		case "RoleBinding":
			strict(&rbacv1.RoleBinding{})
		case "ServiceAccount":
			strict(&corev1.ServiceAccount{})
		case "Issuer", "Certificate":
		default:
			t.Fatalf("unexpected kind %q", tm.Kind)
		}
		var m map[string]any
		_ = yaml.Unmarshal([]byte(doc), &m)
		o.other[tm.Kind+"/"+name] = m
	}
	return o
}

func TestLint(t *testing.T) {
	for _, sets := range [][]string{nil, {"certificates.mode=certManager"}} {
		args := []string{"lint", "--strict", ".", "--namespace", namespace}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := run(t, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
}

func injectorArgs(t *testing.T, o *objects) []string {
	t.Helper()
	d := o.deployments["tether-injector"]
	if d == nil {
		t.Fatal("no tether-injector Deployment")
	}
	return d.Spec.Template.Spec.Containers[0].Args
}

// checkArgs parses the rendered arguments with the injector's own flags.
func checkArgs(t *testing.T, args []string) app.Config {
	t.Helper()
	var cfg app.Config
	fs := flag.NewFlagSet("tether-injector", flag.ContinueOnError)
	cfg.RegisterFlags(fs, "")
	expanded := make([]string, len(args))
	for i, a := range args {
		expanded[i] = strings.ReplaceAll(a, "$(POD_NAMESPACE)", namespace)
	}
	if err := fs.Parse(expanded); err != nil {
		t.Fatalf("the injector rejects the chart's arguments: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the injector rejects the chart's arguments: %v", err)
	}
	return cfg
}

func TestDefaults(t *testing.T) {
	o := decode(t, render(t))

	d := o.deployments["tether-injector"]
	spec := d.Spec.Template.Spec
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}
	psc := spec.SecurityContext
	if psc == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context not restricted: %+v", psc)
	}
	c := spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context not restricted: %+v", c.SecurityContext)
	}
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("no soft pod anti-affinity: %+v", spec.Affinity)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe: %+v", c.ReadinessProbe)
	}
	cfg := checkArgs(t, c.Args)
	if !cfg.SelfManaged || cfg.WebhookConfig != "tether-injector" || cfg.ServiceName != "tether-injector" ||
		!cfg.NativeSidecar || cfg.SidecarClusterRole != "tether-sidecar" || cfg.SidecarImage != "ghcr.io/tetherproxy/tether-sidecar:0.1.0" {
		t.Errorf("injector configuration from the chart: %+v", cfg)
	}
	if _, ok := o.secrets["tether-injector-tls"]; !ok {
		t.Error("no Secret for the self-managed certificates")
	}

	if p := o.pdbs["tether-injector"]; p == nil || p.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget: %+v", p)
	}

	svc := o.services["tether-injector"]
	if svc == nil || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.StrVal != "webhook" || c.Ports[0].Name != "webhook" {
		t.Errorf("Service does not reach the webhook port: %+v", svc)
	}

	mwc := o.webhooks["tether-injector"]
	if mwc == nil || len(mwc.Webhooks) != 2 {
		t.Fatalf("webhook configuration: %+v", mwc)
	}
	paths := map[string]string{"ns.inject.tether.dev": "/mutate", "pod.inject.tether.dev": "/mutate/opt-in"}
	nsOps := map[string]metav1.LabelSelectorOperator{"ns.inject.tether.dev": metav1.LabelSelectorOpIn, "pod.inject.tether.dev": metav1.LabelSelectorOpNotIn}
	objOps := map[string]string{"ns.inject.tether.dev": "NotIn false", "pod.inject.tether.dev": "In true"}
	for _, w := range mwc.Webhooks {
		if *w.SideEffects != admissionregv1.SideEffectClassNone || !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) ||
			*w.ReinvocationPolicy != admissionregv1.IfNeededReinvocationPolicy || *w.TimeoutSeconds != 5 ||
			*w.FailurePolicy != admissionregv1.Fail {
			t.Errorf("%s: wrong settings: %+v", w.Name, w)
		}
		if w.ClientConfig.Service == nil || *w.ClientConfig.Service.Path != paths[w.Name] ||
			w.ClientConfig.Service.Name != "tether-injector" || *w.ClientConfig.Service.Port != 443 || len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("%s: client config %+v", w.Name, w.ClientConfig)
		}
		if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregv1.OperationType{admissionregv1.Create}) ||
			!slices.Equal(w.Rules[0].Resources, []string{"pods"}) {
			t.Errorf("%s: rules %+v", w.Name, w.Rules)
		}
		ex := w.NamespaceSelector.MatchExpressions
		if len(ex) != 2 || ex[0].Key != "tether.dev/injection" || ex[0].Operator != nsOps[w.Name] ||
			ex[1].Key != "kubernetes.io/metadata.name" || ex[1].Operator != metav1.LabelSelectorOpNotIn ||
			!slices.Equal(ex[1].Values, []string{"kube-system", namespace}) {
			t.Errorf("%s: namespaceSelector %+v", w.Name, ex)
		}
		obj := w.ObjectSelector.MatchExpressions
		if len(obj) != 1 || obj[0].Key != "tether.dev/inject" || fmt.Sprintf("%s %s", obj[0].Operator, strings.Join(obj[0].Values, ",")) != objOps[w.Name] {
			t.Errorf("%s: objectSelector %+v", w.Name, obj)
		}
	}

	// The sidecar may watch pods, nothing more.
	sr := o.clusterRoles["tether-sidecar"]
	if sr == nil || len(sr.Rules) != 1 || !slices.Equal(sr.Rules[0].Resources, []string{"pods"}) ||
		!slices.Equal(sr.Rules[0].Verbs, []string{"get", "list", "watch"}) || !slices.Equal(sr.Rules[0].APIGroups, []string{""}) {
		t.Errorf("sidecar ClusterRole: %+v", sr)
	}
	ir := o.clusterRoles["tether-injector"]
	if ir == nil || !hasRule(ir.Rules, "clusterroles", "bind", "tether-sidecar") ||
		!hasRule(ir.Rules, "mutatingwebhookconfigurations", "patch", "tether-injector") ||
		!hasRule(ir.Rules, "namespaces", "watch", "") || !hasRule(ir.Rules, "rolebindings", "create", "") {
		t.Errorf("injector ClusterRole: %+v", ir)
	}
	if r := o.roles["tether-injector"]; r == nil || !hasRule(r.Rules, "secrets", "update", "tether-injector-tls") {
		t.Errorf("injector Role: %+v", r)
	}
}

func hasRule(rules []rbacv1.PolicyRule, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(name == "" || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

func TestVariants(t *testing.T) {
	t.Run("one replica has no PDB", func(t *testing.T) {
		o := decode(t, render(t, "injector.replicas=1"))
		if len(o.pdbs) != 0 {
			t.Fatal("PDB rendered for one replica")
		}
	})
	t.Run("cert-manager with its own CA", func(t *testing.T) {
		o := decode(t, render(t, "certificates.mode=certManager"))
		for _, k := range []string{"Issuer/tether-selfsigned", "Certificate/tether-ca", "Issuer/tether-ca", "Certificate/tether-injector"} {
			if o.other[k] == nil {
				t.Errorf("missing %s", k)
			}
		}
		if got := o.webhooks["tether-injector"].Annotations["cert-manager.io/inject-ca-from"]; got != namespace+"/tether-injector" {
			t.Errorf("inject-ca-from = %q", got)
		}
		cfg := checkArgs(t, injectorArgs(t, o))
		if cfg.SelfManaged || cfg.CertDir == "" {
			t.Errorf("cert-manager mode args: %+v", cfg)
		}
		vols := o.deployments["tether-injector"].Spec.Template.Spec.Volumes
		if len(vols) != 1 || vols[0].Secret.SecretName != "tether-injector-tls" {
			t.Errorf("serving Secret not mounted: %+v", vols)
		}
		if len(o.secrets) != 0 || len(o.roles) != 0 || hasRule(o.clusterRoles["tether-injector"].Rules, "mutatingwebhookconfigurations", "patch", "") {
			t.Error("self-managed objects or rights rendered in cert-manager mode")
		}
	})
	t.Run("cert-manager with a ClusterIssuer", func(t *testing.T) {
		o := decode(t, render(t, "certificates.mode=certManager", "certificates.certManager.issuerRef.name=corp-ca",
			"certificates.certManager.issuerRef.kind=ClusterIssuer"))
		if o.other["Issuer/tether-ca"] != nil {
			t.Error("chart CA rendered although an issuer was given")
		}
		ref := o.other["Certificate/tether-injector"]["spec"].(map[string]any)["issuerRef"].(map[string]any)
		if ref["name"] != "corp-ca" || ref["kind"] != "ClusterIssuer" {
			t.Errorf("issuerRef %v", ref)
		}
	})
	t.Run("sidecar and webhook settings reach the injector", func(t *testing.T) {
		o := decode(t, render(t, "webhook.failurePolicy=Ignore", "sidecar.nativeSidecar=false", "sidecar.store=redis",
			"sidecar.redis.address=redis.tether-system.svc:6379", "sidecar.redis.passwordSecret=redis-auth",
			"sidecar.gossip.keySecret=gossip-key", "webhook.excludedNamespaces={monitoring}", "injector.podAntiAffinity=hard",
			"sidecar.resources.limits.cpu=1"))
		cfg := checkArgs(t, injectorArgs(t, o))
		if cfg.NativeSidecar || cfg.DefaultStore != "redis" || cfg.RedisAddress != "redis.tether-system.svc:6379" ||
			cfg.RedisPasswordSecret != "redis-auth" || cfg.GossipKeySecret != "gossip-key" || cfg.SidecarCPULimit != "1" ||
			!slices.Contains(cfg.ExcludedNamespaces, "monitoring") {
			t.Errorf("injector configuration: %+v", cfg)
		}
		for _, w := range o.webhooks["tether-injector"].Webhooks {
			if *w.FailurePolicy != admissionregv1.Ignore || !slices.Contains(w.NamespaceSelector.MatchExpressions[1].Values, "monitoring") {
				t.Errorf("%s: %+v", w.Name, w)
			}
		}
		if a := o.deployments["tether-injector"].Spec.Template.Spec.Affinity.PodAntiAffinity; len(a.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("hard anti-affinity: %+v", a)
		}
	})
	t.Run("no RBAC management in cert-manager mode needs no injector ClusterRole", func(t *testing.T) {
		o := decode(t, render(t, "certificates.mode=certManager", "rbac.manageSidecarRoleBindings=false"))
		if _, ok := o.clusterRoles["tether-injector"]; ok {
			t.Error("injector ClusterRole rendered with nothing to grant")
		}
		if cfg := checkArgs(t, injectorArgs(t, o)); cfg.ManageRBAC {
			t.Error("--manage-rbac still true")
		}
	})
}

// TestSchemaRejects: typos and bad values fail at render time.
func TestSchemaRejects(t *testing.T) {
	for _, set := range []string{
		"injector.replica=3",
		"webhook.failurePolicy=Sometimes",
		"webhook.timeoutSeconds=60",
		"sidecar.store=etcd",
		"sidecar.redis.address=nohost",
		"sidecar.gossip.keySecret=Bad_Name",
		"certificates.mode=vault",
		"certificates.selfManaged.certLifetime=one-year",
		"sidecar.resources.limits.gpu=1",
		"rbac.create=true",
	} {
		if _, err := run(t, "template", release, ".", "--namespace", namespace, "--set", set); err == nil {
			t.Errorf("--set %s rendered; the schema should reject it", set)
		}
	}
}

const installHeader = `# tether: the injector, its webhook configuration and RBAC, rendered from
# charts/tether with the default values:
#   helm template tether charts/tether --namespace tether-system
# (plus the Namespace). Kept in sync by charts/tether/chart_test.go; rewrite
# with: go test ./charts/... -update
#
#   kubectl apply -f manifests/install.yaml
---
apiVersion: v1
kind: Namespace
metadata:
  name: tether-system
`

// TestInstallManifest: manifests/install.yaml is the rendering of the defaults.
func TestInstallManifest(t *testing.T) {
	want := installHeader + render(t)
	path := filepath.Join("..", "..", "manifests", "install.yaml")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./charts/... -update writes it)", err)
	}
	if string(got) != want {
		t.Fatal("manifests/install.yaml is not `helm template` of the chart's defaults: go test ./charts/... -update rewrites it")
	}
}
