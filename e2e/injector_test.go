//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/rbac"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// urlClientConfig points every entry of the chart's rendered
// MutatingWebhookConfiguration at https://addr<path of its Service client
// config>: with a URL and a caBundle the API server needs no Service (and
// there is no kube-proxy or DNS here to reach one).
func urlClientConfig(t *testing.T, objs []*unstructured.Unstructured, addr string) (urls []string) {
	t.Helper()
	mw := findObject(t, objs, "MutatingWebhookConfiguration", injectorName)
	hooks, _, err := unstructured.NestedSlice(mw.Object, "webhooks")
	if err != nil || len(hooks) == 0 {
		t.Fatalf("rendered webhooks: %v (%d entries)", err, len(hooks))
	}
	for i, h := range hooks {
		w := h.(map[string]any)
		path, _, _ := unstructured.NestedString(w, "clientConfig", "service", "path")
		if path == "" {
			t.Fatalf("webhook %v has no service path", w["name"])
		}
		u := "https://" + addr + path
		w["clientConfig"] = map[string]any{"url": u}
		hooks[i] = w
		urls = append(urls, u)
	}
	if err := unstructured.SetNestedSlice(mw.Object, hooks, "webhooks"); err != nil {
		t.Fatal(err)
	}
	return urls
}

// routerPod is a router pod as a Deployment would create it, with the
// tether annotations of a one-pool sidecar.
func routerPod(name string, labels, annotations map[string]string) *corev1.Pod {
	a := map[string]string{
		inject.AnnotationSources:         "Header:X-Session-ID",
		inject.AnnotationBackendSelector: "app=ds",
		inject.AnnotationBackendPort:     "8000",
	}
	for k, v := range annotations {
		a[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: a},
		Spec: corev1.PodSpec{ServiceAccountName: "router", Containers: []corev1.Container{{
			Name: "router", Image: "example.com/router:1.0",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

// sidecarOf returns the injected sidecar container, or nil.
func sidecarOf(p *corev1.Pod) *corev1.Container {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == inject.ContainerName {
				return &cs[i]
			}
		}
	}
	return nil
}

// checkInjected asserts what the API server stored for an injected router
// pod: a native sidecar with a valid config, probes and a locked-down
// security context, next to the untouched router container.
func checkInjected(t *testing.T, p *corev1.Pod) {
	t.Helper()
	sc := sidecarOf(p)
	if sc == nil {
		t.Fatalf("pod %s/%s has no %s container: init %v, containers %v", p.Namespace, p.Name, inject.ContainerName, p.Spec.InitContainers, p.Spec.Containers)
	}
	if !slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == inject.ContainerName }) {
		t.Fatalf("sidecar is not an init container (native sidecar)")
	}
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("sidecar restartPolicy %v, want Always", sc.RestartPolicy)
	}
	if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != "router" {
		t.Fatalf("containers %v, want the router alone", p.Spec.Containers)
	}
	if p.Annotations[inject.AnnotationStatus] == "" {
		t.Fatalf("no %s annotation", inject.AnnotationStatus)
	}
	if p.Labels[inject.LabelInjected] != "true" {
		t.Fatalf("no %s label: %v", inject.LabelInjected, p.Labels)
	}

	var doc string
	for _, e := range sc.Env {
		if e.Name == inject.EnvConfig {
			doc = e.Value
		}
	}
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("%s does not parse: %v\n%s", inject.EnvConfig, err, doc)
	}
	if len(cfg.Pools) != 1 {
		t.Fatalf("%d pools, want 1:\n%s", len(cfg.Pools), doc)
	}
	pool := cfg.Pools[0]
	if k := pool.Backends.Kubernetes; k == nil || k.Selector != "app=ds" || k.Port != 8000 {
		t.Fatalf("pool backends %+v, want kubernetes app=ds port 8000:\n%s", pool.Backends, doc)
	}
	if srcs := pool.SessionSticky.Sources; len(srcs) != 1 || srcs[0].Type != "Header" || srcs[0].Name != "X-Session-ID" {
		t.Fatalf("sources %+v, want Header X-Session-ID", srcs)
	}

	for name, pr := range map[string]*corev1.Probe{"startup": sc.StartupProbe, "readiness": sc.ReadinessProbe, "liveness": sc.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Fatalf("no HTTP %s probe: %+v", name, pr)
		}
	}
	if sc.ReadinessProbe.HTTPGet.Path != "/readyz" || sc.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Fatalf("probe paths: readiness %s, liveness %s", sc.ReadinessProbe.HTTPGet.Path, sc.LivenessProbe.HTTPGet.Path)
	}

	s := sc.SecurityContext
	switch {
	case s == nil:
		t.Fatal("sidecar has no securityContext")
	case s.RunAsNonRoot == nil || !*s.RunAsNonRoot:
		t.Fatal("sidecar may run as root")
	case s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem:
		t.Fatal("sidecar root filesystem is writable")
	case s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation:
		t.Fatal("sidecar may escalate privileges")
	case s.Capabilities == nil || !slices.Contains(s.Capabilities.Drop, "ALL"):
		t.Fatalf("sidecar capabilities %+v, want ALL dropped", s.Capabilities)
	}
}

// TestScenario9Injector: the injector, run as the chart deploys it,
// serves its webhook over TLS to the real API server (URL client config,
// caBundle from its self-managed certificates). A router pod of a labelled
// namespace is stored with the sidecar, one of an unlabelled namespace
// without (unless it opts in with its label), a bad annotation is denied
// with its message, and the labelled namespace gets the sidecar RoleBinding.
func TestScenario9Injector(t *testing.T) {
	ctx := context.Background()
	c := cluster.Start(t)
	objs := renderChart(t)
	addr := cluster.FreeAddr(t, "127.0.0.1")
	urls := urlClientConfig(t, objs, addr)
	applyChart(t, c, objs)
	startInjector(t, c, objs, addr)
	for _, w := range waitCABundle(t, c) {
		if w.ClientConfig.URL == nil || !slices.Contains(urls, *w.ClientConfig.URL) {
			t.Fatalf("webhook %s client config %+v lost its URL", w.Name, w.ClientConfig)
		}
	}
	t.Logf("webhook URLs %v", urls)

	c.CreateNamespace(t, "s9-on", map[string]string{inject.NamespaceLabel: inject.NamespaceLabelValue})
	c.CreateNamespace(t, "s9-off", nil)
	on, off := c.Client().CoreV1().Pods("s9-on"), c.Client().CoreV1().Pods("s9-off")

	// The API server learns webhook configurations through a watch; a
	// dry run goes through admission without storing, so poll with one
	// until the caBundle patch is in effect.
	testkit.Eventually(t, 30*time.Second, "the API server to call the injector", func() error {
		p, err := on.Create(ctx, routerPod("probe", nil, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if sidecarOf(p) == nil {
			return fmt.Errorf("dry-run pod not injected")
		}
		return nil
	})

	t.Run("labelled namespace", func(t *testing.T) {
		p, err := on.Create(ctx, routerPod("router-0", map[string]string{"app": "router"}, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// What the API server stored, not what Create echoed.
		if p, err = on.Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		checkInjected(t, p)
	})

	t.Run("unlabelled namespace", func(t *testing.T) {
		p, err := off.Create(ctx, routerPod("router-0", map[string]string{"app": "router"}, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sc := sidecarOf(p); sc != nil || len(p.Spec.InitContainers) > 0 || p.Annotations[inject.AnnotationStatus] != "" {
			t.Fatalf("pod of an unlabelled namespace was injected: %+v", p.Spec)
		}
	})

	t.Run("opt-in label elsewhere", func(t *testing.T) {
		p, err := off.Create(ctx, routerPod("router-1", map[string]string{"app": "router", inject.LabelInject: "true"}, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkInjected(t, p)
	})

	t.Run("opt-out label", func(t *testing.T) {
		p, err := on.Create(ctx, routerPod("router-out", map[string]string{"app": "router", inject.LabelInject: "false"}, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sidecarOf(p) != nil {
			t.Fatal("pod labelled tether.dev/inject=false was injected")
		}
	})

	t.Run("bad annotation denied", func(t *testing.T) {
		_, err := on.Create(ctx, routerPod("router-bad", nil, map[string]string{inject.AnnotationSources: "Heder:x"}), metav1.CreateOptions{})
		if err == nil {
			t.Fatal("pod with tether.dev/sources: Heder:x was admitted")
		}
		msg := err.Error()
		for _, want := range []string{
			`admission webhook "ns.inject.tether.dev" denied the request`,
			`tether.dev/sources: unknown source type "Heder"`,
		} {
			if !strings.Contains(msg, want) {
				t.Fatalf("API error %q does not contain %q", msg, want)
			}
		}
		if _, err := on.Get(ctx, "router-bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("denied pod exists (err %v)", err)
		}
		t.Logf("denied: %s", msg)
	})

	t.Run("sidecar RoleBinding", func(t *testing.T) {
		// The router pod's own service account, and only it: the model
		// servers' (or any other) account of the namespace gains nothing.
		waitRoleBinding(t, c, "s9-on", true, "router")
		if _, err := c.Client().RbacV1().RoleBindings("s9-off").Get(ctx, rbac.DefaultBindingName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("unlabelled namespace has a sidecar RoleBinding (err %v)", err)
		}
		checkPodReaders(t, c, "s9-on", "router", "default")
	})
}
