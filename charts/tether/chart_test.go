// Package chart_test checks the Helm chart with the real helm binary:
// lint, the rendered objects (decoded strictly into their Kubernetes
// types, so a misspelt field fails), the values schema, the agreement of
// the rendered injector arguments with the injector's own flags, and
// manifests/install.yaml being the rendering of the defaults.
package chart_test

import (
	"bytes"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/app"
	"github.com/tetherproxy/tether/injector/check"
	"github.com/tetherproxy/tether/injector/inject"
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
	return renderArgs(t, nil, sets...)
}

// renderArgs renders with extra helm flags (--skip-tests) and --set values.
func renderArgs(t *testing.T, flags []string, sets ...string) string {
	t.Helper()
	args := append([]string{"template", release, ".", "--namespace", namespace}, flags...)
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
	pods         map[string]*corev1.Pod // the helm test hook
	pdbs         map[string]*policyv1.PodDisruptionBudget
	services     map[string]*corev1.Service
	secrets      map[string]*corev1.Secret
	webhooks     map[string]*admissionregv1.MutatingWebhookConfiguration
	clusterRoles map[string]*rbacv1.ClusterRole
	roles        map[string]*rbacv1.Role
	netpols      map[string]*networkingv1.NetworkPolicy               // namespace/name
	policies     map[string]*admissionregv1.ValidatingAdmissionPolicy // name
	other        map[string]map[string]any                            // kind/name → object (cert-manager kinds, bindings…)
}

func decode(t *testing.T, out string) *objects {
	t.Helper()
	o := &objects{
		deployments: map[string]*appsv1.Deployment{}, pdbs: map[string]*policyv1.PodDisruptionBudget{}, pods: map[string]*corev1.Pod{},
		services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{},
		webhooks:     map[string]*admissionregv1.MutatingWebhookConfiguration{},
		clusterRoles: map[string]*rbacv1.ClusterRole{}, roles: map[string]*rbacv1.Role{}, other: map[string]map[string]any{},
		netpols: map[string]*networkingv1.NetworkPolicy{}, policies: map[string]*admissionregv1.ValidatingAdmissionPolicy{},
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
			o.secrets[v.Namespace+"/"+name] = v
		case "NetworkPolicy":
			v := &networkingv1.NetworkPolicy{}
			strict(v)
			o.netpols[v.Namespace+"/"+name] = v
		case "ValidatingAdmissionPolicy":
			v := &admissionregv1.ValidatingAdmissionPolicy{}
			strict(v)
			o.policies[name] = v
		case "ValidatingAdmissionPolicyBinding":
			strict(&admissionregv1.ValidatingAdmissionPolicyBinding{})
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
		case "Pod":
			v := &corev1.Pod{}
			strict(v)
			o.pods[name] = v
		case "ConfigMap":
			strict(&corev1.ConfigMap{})
		case "Issuer", "Certificate", "PodMonitor", "ServiceMonitor", "PrometheusRule":
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
		!cfg.NativeSidecar || cfg.SidecarClusterRole != "tether-sidecar" || cfg.SidecarRoleBinding != "tether-sidecar" ||
		cfg.GossipKeySecret != "tether-gossip-key" || cfg.PreStopSleep != 15*time.Second || cfg.RedisTLS {
		t.Errorf("injector configuration from the chart: %+v", cfg)
	}
	// The default image tag is the chart's appVersion: a release tag.
	app := appVersion(t)
	if want := "ghcr.io/tetherproxy/tether-sidecar:" + app; cfg.SidecarImage != want {
		t.Errorf("sidecar image %q, want %q", cfg.SidecarImage, want)
	}
	if want := "ghcr.io/tetherproxy/tether-injector:" + app; c.Image != want {
		t.Errorf("injector image %q, want %q", c.Image, want)
	}
	if len(o.netpols) != 0 || len(o.secrets) != 1 {
		t.Errorf("gossip objects rendered without sidecar.gossip.namespaces: %d NetworkPolicies, %d Secrets", len(o.netpols), len(o.secrets))
	}
	if _, ok := o.secrets[namespace+"/tether-injector-tls"]; !ok {
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
	// The ModelServer readers may watch modelservers, nothing more.
	mr := o.clusterRoles["tether-sidecar-modelservers"]
	if mr == nil || len(mr.Rules) != 1 || !slices.Equal(mr.Rules[0].Resources, []string{"modelservers"}) ||
		!slices.Equal(mr.Rules[0].Verbs, []string{"get", "list", "watch"}) || !slices.Equal(mr.Rules[0].APIGroups, []string{"networking.serving.volcano.sh"}) {
		t.Errorf("ModelServer ClusterRole: %+v", mr)
	}
	ir := o.clusterRoles["tether-injector"]
	if ir == nil || !hasRule(ir.Rules, "clusterroles", "bind", "tether-sidecar") || !hasRule(ir.Rules, "clusterroles", "bind", "tether-sidecar-modelservers") ||
		!hasRule(ir.Rules, "mutatingwebhookconfigurations", "patch", "tether-injector") ||
		!hasRule(ir.Rules, "namespaces", "watch", "") || !hasRule(ir.Rules, "pods", "watch", "") ||
		!hasRule(ir.Rules, "rolebindings", "create", "") {
		t.Errorf("injector ClusterRole: %+v", ir)
	}
	// RoleBindings: every verb but create only by the sidecar bindings' names.
	for _, r := range ir.Rules {
		if !slices.Contains(r.Resources, "rolebindings") {
			continue
		}
		if slices.Equal(r.Verbs, []string{"create"}) {
			continue
		}
		if !slices.Equal(r.ResourceNames, []string{"tether-sidecar", "tether-sidecar-modelservers"}) {
			t.Errorf("injector may %v RoleBindings of any name: %+v", r.Verbs, r)
		}
	}
	for _, verb := range []string{"get", "list", "watch", "update", "delete"} {
		for _, name := range []string{"tether-sidecar", "tether-sidecar-modelservers"} {
			if !hasRule(ir.Rules, "rolebindings", verb, name) {
				t.Errorf("injector may not %s its RoleBinding %s", verb, name)
			}
		}
	}
	if pol := o.policies["tether-injector-rolebindings"]; pol == nil || len(pol.Spec.Validations) != 3 ||
		len(pol.Spec.MatchConditions) != 1 ||
		!strings.Contains(pol.Spec.MatchConditions[0].Expression, `"system:serviceaccount:tether-system:tether-injector"`) {
		t.Errorf("ValidatingAdmissionPolicy for the injector's RoleBindings: %+v", pol)
	}
	if o.other["ValidatingAdmissionPolicyBinding/tether-injector-rolebindings"] == nil {
		t.Error("no ValidatingAdmissionPolicyBinding")
	}
	if r := o.roles["tether-injector"]; r == nil || !hasRule(r.Rules, "secrets", "update", "tether-injector-tls") {
		t.Errorf("injector Role: %+v", r)
	}
}

// appVersion is Chart.yaml's appVersion, which must be a release tag
// (vX.Y.Z): what `git describe` prints on the release commit, hence the
// tag make images and make push give that commit's images.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(c.AppVersion) {
		t.Fatalf("appVersion %q is not a release tag (vX.Y.Z)", c.AppVersion)
	}
	return c.AppVersion
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
		if len(o.secrets) != 0 || o.roles["tether-injector"] != nil || hasRule(o.clusterRoles["tether-injector"].Rules, "mutatingwebhookconfigurations", "patch", "") {
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
			"sidecar.redis.username=tether", "sidecar.redis.tls=true", "sidecar.redis.caSecret=redis-ca", "sidecar.preStopSleep=40s",
			"sidecar.gossip.keySecret=gossip-key", "webhook.excludedNamespaces={monitoring}", "injector.podAntiAffinity=hard",
			"sidecar.resources.limits.cpu=1"))
		cfg := checkArgs(t, injectorArgs(t, o))
		if cfg.NativeSidecar || cfg.DefaultStore != "redis" || cfg.RedisAddress != "redis.tether-system.svc:6379" ||
			cfg.RedisPasswordSecret != "redis-auth" || cfg.RedisUsername != "tether" || !cfg.RedisTLS || cfg.RedisCASecret != "redis-ca" ||
			cfg.PreStopSleep != 40*time.Second || cfg.GossipKeySecret != "gossip-key" || cfg.SidecarCPULimit != "1" ||
			!slices.Contains(cfg.ExcludedNamespaces, "monitoring") {
			t.Errorf("injector configuration: %+v", cfg)
		}
		if cfg := checkArgs(t, injectorArgs(t, decode(t, render(t, "sidecar.gossip.keySecret=")))); cfg.GossipKeySecret != "" {
			t.Errorf("an empty sidecar.gossip.keySecret became %q", cfg.GossipKeySecret)
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
	t.Run("gossip key and NetworkPolicy per namespace", func(t *testing.T) {
		o := decode(t, render(t, "sidecar.gossip.namespaces={llm,chat}"))
		port := intstr.FromInt(inject.GossipPort)
		if got := fmt.Sprint(inject.GossipPort); got != "17946" {
			t.Fatalf("the chart's tether.gossipPort (17946) differs from the injector's %s", got)
		}
		keys := map[string]bool{}
		for _, ns := range []string{"llm", "chat"} {
			sec := o.secrets[ns+"/tether-gossip-key"]
			if sec == nil || sec.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Fatalf("%s: gossip key Secret %+v", ns, sec)
			}
			// The file the sidecar reads holds a base64 32-byte key.
			k, err := base64.StdEncoding.DecodeString(string(sec.Data["key"]))
			if err != nil || len(k) != 32 {
				t.Fatalf("%s: key %q is not base64 of 32 bytes: %v", ns, sec.Data["key"], err)
			}
			keys[string(k)] = true

			np := o.netpols[ns+"/tether-gossip"]
			if np == nil {
				t.Fatalf("%s: no NetworkPolicy", ns)
			}
			sel := map[string]string{inject.LabelGossipPort: "17946"}
			in := np.Spec.Ingress
			if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, sel) || len(in) != 2 ||
				len(in[0].From) != 1 || !reflect.DeepEqual(in[0].From[0].PodSelector.MatchLabels, sel) ||
				len(in[0].Ports) != 2 || *in[0].Ports[0].Port != port || *in[0].Ports[1].Port != port ||
				*in[0].Ports[1].Protocol != corev1.ProtocolUDP {
				t.Fatalf("%s: gossip rule %+v", ns, np.Spec)
			}
			// The other ports: every port but the gossip port, from anywhere.
			if len(in[1].From) != 0 || len(in[1].Ports) != 5 || in[1].Ports[0].Port.IntValue() != 1 || *in[1].Ports[0].EndPort != 17945 ||
				in[1].Ports[1].Port.IntValue() != 17947 || *in[1].Ports[1].EndPort != 65535 {
				t.Fatalf("%s: other-ports rule %+v", ns, in[1])
			}
		}
		if len(keys) != 2 {
			t.Error("two namespaces got the same key")
		}

		o = decode(t, render(t, "sidecar.gossip.namespaces={llm}", "sidecar.gossip.networkPolicy.allowOtherPorts=false"))
		if np := o.netpols["llm/tether-gossip"]; np == nil || len(np.Spec.Ingress) != 1 {
			t.Errorf("allowOtherPorts=false: %+v", np)
		}
		o = decode(t, render(t, "sidecar.gossip.namespaces={llm}", "sidecar.gossip.networkPolicy.enabled=false"))
		if len(o.netpols) != 0 || o.secrets["llm/tether-gossip-key"] == nil {
			t.Error("networkPolicy.enabled=false: the policy is rendered, or the key is not")
		}
		if _, err := run(t, "template", release, ".", "--namespace", namespace,
			"--set", "sidecar.gossip.namespaces={llm}", "--set", "sidecar.gossip.keySecret="); err == nil ||
			!strings.Contains(err.Error(), "sidecar.gossip.namespaces needs sidecar.gossip.keySecret") {
			t.Errorf("namespaces without a keySecret: %v", err)
		}
	})
	t.Run("without the admission policy", func(t *testing.T) {
		o := decode(t, render(t, "rbac.admissionPolicy=false"))
		if len(o.policies) != 0 {
			t.Error("ValidatingAdmissionPolicy rendered with rbac.admissionPolicy=false")
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
		"sidecar.gossip.namespaces={Bad_NS}",
		"sidecar.gossip.networkPolicy.enable=true",
		"sidecar.preStopSleep=1.5s",
		"sidecar.redis.username=a b",
		"rbac.admissionPolicy=maybe",
		"certificates.mode=vault",
		"certificates.selfManaged.certLifetime=one-year",
		"sidecar.resources.limits.gpu=1",
		"rbac.create=true",
		"nameOverride=Bad_Name",
		"fullnameOverride=" + strings.Repeat("x", 51),
		"sidecar.prometheusScrape=yes",
		"monitoring.podMonitor.enable=true",
		"monitoring.podMonitor.interval=soon",
		"monitoring.serviceMonitor.namespaces={llm}",
		"monitoring.podMonitor.labels.release=1",
	} {
		if _, err := run(t, "template", release, ".", "--namespace", namespace, "--set", set); err == nil {
			t.Errorf("--set %s rendered; the schema should reject it", set)
		}
	}
}

const installHeader = `# tether: the injector, its webhook configuration and RBAC, rendered from
# charts/tether with the default values, without the helm test hook:
#   helm template tether charts/tether --namespace tether-system --skip-tests
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
	want := installHeader + renderArgs(t, []string{"--skip-tests"})
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

// TestNameOverrides: nameOverride and fullnameOverride rename every
// object consistently: the injector's arguments, Service, webhook
// configuration, RBAC and selectors agree with each other.
func TestNameOverrides(t *testing.T) {
	for _, c := range []struct {
		sets       []string
		base, name string
	}{
		{nil, "tether", "tether"},
		{[]string{"nameOverride=sticky"}, "tether-sticky", "sticky"},
		{[]string{"fullnameOverride=llm-tether"}, "llm-tether", "tether"},
		{[]string{"nameOverride=sticky", "fullnameOverride=edge"}, "edge", "sticky"},
	} {
		o := decode(t, render(t, c.sets...))
		inj := c.base + "-injector"
		d := o.deployments[inj]
		if d == nil {
			t.Fatalf("%v: no Deployment %s", c.sets, inj)
		}
		cfg := checkArgs(t, d.Spec.Template.Spec.Containers[0].Args)
		if cfg.ServiceName != inj || cfg.WebhookConfig != inj || cfg.SecretName != inj+"-tls" ||
			cfg.SidecarClusterRole != c.base+"-sidecar" || cfg.SidecarRoleBinding != c.base+"-sidecar" {
			t.Errorf("%v: injector arguments %+v", c.sets, cfg)
		}
		if o.services[inj] == nil || o.webhooks[inj] == nil || o.clusterRoles[c.base+"-sidecar"] == nil || o.secrets[namespace+"/"+inj+"-tls"] == nil {
			t.Errorf("%v: objects not named %s-*", c.sets, c.base)
		}
		for _, w := range o.webhooks[inj].Webhooks {
			if w.ClientConfig.Service.Name != inj {
				t.Errorf("%v: webhook %s calls Service %s", c.sets, w.Name, w.ClientConfig.Service.Name)
			}
		}
		labels := d.Spec.Template.Labels
		if labels["app.kubernetes.io/name"] != c.name || !reflect.DeepEqual(d.Spec.Selector.MatchLabels, o.services[inj].Spec.Selector) {
			t.Errorf("%v: pod labels %v, Deployment selector %v, Service selector %v", c.sets, labels, d.Spec.Selector.MatchLabels, o.services[inj].Spec.Selector)
		}
		for k, v := range d.Spec.Selector.MatchLabels {
			if labels[k] != v {
				t.Errorf("%v: the Deployment's selector %s=%s does not select its pods", c.sets, k, v)
			}
		}
		if p := o.pods[c.base+"-test"]; p == nil || !slices.Contains(p.Spec.Containers[0].Args, "--name="+inj) {
			t.Errorf("%v: helm test pod %s does not check %s", c.sets, c.base+"-test", inj)
		}
	}
}

// TestMonitoring: nothing of the Prometheus Operator by default; when
// enabled, the PodMonitor selects injected pods on the sidecar's admin
// port name and the ServiceMonitor the injector Service's metrics port,
// which reaches the injector's admin listener.
func TestMonitoring(t *testing.T) {
	o := decode(t, render(t))
	for k := range o.other {
		if strings.HasPrefix(k, "PodMonitor/") || strings.HasPrefix(k, "ServiceMonitor/") {
			t.Errorf("%s rendered by default", k)
		}
	}
	if cfg := checkArgs(t, injectorArgs(t, o)); cfg.PrometheusScrape {
		t.Error("prometheus.io annotations on by default")
	}

	o = decode(t, render(t, "monitoring.podMonitor.enabled=true", "monitoring.serviceMonitor.enabled=true",
		"monitoring.podMonitor.labels.release=kps", "monitoring.serviceMonitor.labels.release=kps",
		"monitoring.podMonitor.interval=15s", "sidecar.prometheusScrape=true"))
	pm := o.other["PodMonitor/tether-sidecars"]
	if pm == nil || pm["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Fatalf("PodMonitor: %v", pm)
	}
	spec := pm["spec"].(map[string]any)
	sel := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	ep := spec["podMetricsEndpoints"].([]any)[0].(map[string]any)
	if !reflect.DeepEqual(sel, map[string]any{inject.LabelInjected: "true"}) || ep["port"] != inject.AdminPortName ||
		ep["path"] != inject.MetricsPath || ep["interval"] != "15s" ||
		!reflect.DeepEqual(spec["namespaceSelector"], map[string]any{"any": true}) ||
		pm["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "kps" {
		t.Errorf("PodMonitor spec %v", pm)
	}
	sm := o.other["ServiceMonitor/tether-injector"]
	if sm == nil {
		t.Fatal("no ServiceMonitor")
	}
	sspec := sm["spec"].(map[string]any)
	smSel := sspec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	svc := o.services["tether-injector"]
	for k, v := range smSel {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor's selector %s=%v does not select the injector's Service (labels %v)", k, v, svc.Labels)
		}
	}
	sep := sspec["endpoints"].([]any)[0].(map[string]any)
	var port *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == sep["port"] {
			port = &svc.Spec.Ports[i]
		}
	}
	c := o.deployments["tether-injector"].Spec.Template.Spec.Containers[0]
	cfg := checkArgs(t, c.Args)
	var target *corev1.ContainerPort
	for i := range c.Ports {
		if port != nil && c.Ports[i].Name == port.TargetPort.StrVal {
			target = &c.Ports[i]
		}
	}
	if port == nil || target == nil || cfg.AdminListen != fmt.Sprintf(":%d", target.ContainerPort) || sep["path"] != "/metrics" {
		t.Errorf("the ServiceMonitor's port %v does not reach the admin listener %s (Service port %+v, container port %+v)", sep["port"], cfg.AdminListen, port, target)
	}
	if !cfg.PrometheusScrape {
		t.Error("sidecar.prometheusScrape=true does not reach the injector")
	}

	o = decode(t, render(t, "monitoring.podMonitor.enabled=true", "monitoring.podMonitor.namespaces={llm,chat}"))
	ns := o.other["PodMonitor/tether-sidecars"]["spec"].(map[string]any)["namespaceSelector"]
	if !reflect.DeepEqual(ns, map[string]any{"matchNames": []any{"llm", "chat"}}) {
		t.Errorf("namespaceSelector %v", ns)
	}
}

// TestHelmTest: the test hook runs `tether-injector check` with the
// injector's image as a service account that may read what that check
// reads and nothing more; install.yaml leaves it out.
func TestHelmTest(t *testing.T) {
	o := decode(t, render(t))
	p := o.pods["tether-test"]
	if p == nil || p.Annotations["helm.sh/hook"] != "test" {
		t.Fatalf("no helm test pod: %+v", p)
	}
	c := p.Spec.Containers[0]
	d := o.deployments["tether-injector"].Spec.Template.Spec.Containers[0]
	if c.Image != d.Image || len(c.Command) != 0 || p.Spec.RestartPolicy != corev1.RestartPolicyNever || p.Spec.ServiceAccountName != "tether-test" {
		t.Errorf("test pod: image %s (injector %s), command %v, restartPolicy %s, serviceAccount %s", c.Image, d.Image, c.Command, p.Spec.RestartPolicy, p.Spec.ServiceAccountName)
	}
	if len(c.Args) == 0 || c.Args[0] != "check" || !slices.Contains(c.Args, "--call-webhook") ||
		!slices.Contains(c.Args, "--namespace="+namespace) || !slices.Contains(c.Args, "--name=tether-injector") {
		t.Errorf("test pod args %v", c.Args)
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--checks="); ok {
			if err := check.Known(strings.Split(v, ",")); err != nil {
				t.Error(err)
			}
		}
	}
	if sc := c.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || p.Spec.SecurityContext == nil || !*p.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("test pod security context: %+v %+v", p.Spec.SecurityContext, sc)
	}
	cr := o.clusterRoles["tether-test"]
	if cr == nil || len(cr.Rules) != 1 || !hasRule(cr.Rules, "mutatingwebhookconfigurations", "get", "tether-injector") ||
		!slices.Equal(cr.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("test ClusterRole: %+v", cr)
	}
	r := o.roles["tether-test"]
	if r == nil || len(r.Rules) != 2 || !hasRule(r.Rules, "services", "get", "tether-injector") || !hasRule(r.Rules, "endpointslices", "list", "") {
		t.Errorf("test Role: %+v", r)
	}
	// Every test object is a hook, so `helm install` does not create it.
	for k, m := range o.other {
		md := m["metadata"].(map[string]any)
		if md["name"] == "tether-test" {
			ann, _ := md["annotations"].(map[string]any)
			if ann["helm.sh/hook"] != "test" {
				t.Errorf("%s is not a test hook", k)
			}
		}
	}
	if skipped := decode(t, renderArgs(t, []string{"--skip-tests"})); len(skipped.pods) != 0 || skipped.clusterRoles["tether-test"] != nil {
		t.Error("--skip-tests renders test objects")
	}
}

// TestDashboardAndAlerts: neither by default; when enabled, the
// PrometheusRule carries alerts/tether.rules.yaml and the ConfigMap
// dashboards/tether.json unchanged (the files e2e/observe checks against
// a real Prometheus), the ConfigMap labelled for Grafana's sidecar.
func TestDashboardAndAlerts(t *testing.T) {
	for k := range decode(t, render(t)).other {
		if strings.HasPrefix(k, "PrometheusRule/") || strings.HasPrefix(k, "ConfigMap/") {
			t.Errorf("%s rendered by default", k)
		}
	}
	o := decode(t, render(t, "monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=kps",
		"monitoring.grafanaDashboard.enabled=true", "monitoring.grafanaDashboard.namespace=monitoring",
		"monitoring.grafanaDashboard.annotations.grafana_folder=tether"))
	pr := o.other["PrometheusRule/tether-alerts"]
	if pr == nil || pr["apiVersion"] != "monitoring.coreos.com/v1" || pr["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "kps" {
		t.Fatalf("PrometheusRule: %v", pr)
	}
	rulesYAML, err := os.ReadFile(filepath.Join("alerts", "tether.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(rulesYAML, &rules); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr["spec"], rules) {
		t.Errorf("PrometheusRule spec differs from alerts/tether.rules.yaml:\n%v\n%v", pr["spec"], rules)
	}

	cm := o.other["ConfigMap/tether-dashboard"]
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	meta := cm["metadata"].(map[string]any)
	if meta["namespace"] != "monitoring" || meta["labels"].(map[string]any)["grafana_dashboard"] != "1" ||
		meta["annotations"].(map[string]any)["grafana_folder"] != "tether" {
		t.Errorf("dashboard ConfigMap metadata %v", meta)
	}
	dashboard, err := os.ReadFile(filepath.Join("dashboards", "tether.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm["data"].(map[string]any)["tether.json"]; got != strings.TrimRight(string(dashboard), "\n") {
		t.Errorf("the ConfigMap's tether.json differs from dashboards/tether.json")
	}
}
