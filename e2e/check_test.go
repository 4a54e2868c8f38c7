//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/injector/app"
	"github.com/tetherproxy/tether/injector/certs"
	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// runInjectorCommand runs bin/tether-injector with args (a subcommand)
// and returns its stdout, stderr and exit status.
func runInjectorCommand(t *testing.T, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.Binary(t, "tether-injector"), args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tether-injector %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// checkLines runs `tether-injector check` and returns its report by
// check name ("OK   webhook: ..." under "webhook") and its exit status.
func checkLines(t *testing.T, args ...string) (map[string]string, string, int) {
	t.Helper()
	out, errb, code := runInjectorCommand(t, nil, append([]string{"check"}, args...)...)
	if errb != "" {
		t.Logf("check stderr: %s", errb)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		status, rest, ok := strings.Cut(l, " ")
		if !ok || (status != "OK" && status != "FAIL") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSpace(rest), ":")
		lines[name] = l
	}
	return lines, out, code
}

// wantLine asserts the check's line is OK (or FAIL) and contains every want.
func wantLine(t *testing.T, lines map[string]string, out, name string, okWanted bool, wants ...string) {
	t.Helper()
	l, found := lines[name]
	prefix := "OK   "
	if !okWanted {
		prefix = "FAIL "
	}
	if !found || !strings.HasPrefix(l, prefix+name+": ") {
		t.Fatalf("check %s: want a line starting %q; report:\n%s", name, prefix+name, out)
	}
	for _, w := range wants {
		if !strings.Contains(l, w) {
			t.Fatalf("check %s: %q lacks %q; report:\n%s", name, l, w, out)
		}
	}
}

// markDeploymentReady writes the injector Deployment's status as its
// controller would once its pods are ready (there is no controller
// manager here; the injector runs as a process).
func markDeploymentReady(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	deps := c.Client().AppsV1().Deployments(chartNamespace)
	d, err := deps.Get(ctx, injectorName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	if _, err := deps.UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitWebhookCalled waits until the API server calls the injector for a
// dry-run pod of ns (it learns webhook configurations through a watch).
func waitWebhookCalled(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "the API server to call the injector", func() error {
		p, err := c.Client().CoreV1().Pods(ns).Create(context.Background(), routerPod("probe", nil, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if sidecarOf(p) == nil {
			return fmt.Errorf("dry-run pod not injected")
		}
		return nil
	})
}

// TestScenario11Check: `tether-injector check` against the real API
// server, with the chart applied and the injector serving its webhook:
// every check passes on a healthy install except the one a router pod
// created before its namespace was labelled fails; the chart's helm test
// (its pod's arguments, as its service account) reaches the webhook; then
// a labelled kube-system, the injector's ClusterRoleBinding removed, and a
// caBundle of another CA with the injector stopped each fail their check.
// `tether-injector inject` output is admitted as it is and matches what
// the webhook injects.
func TestScenario11Check(t *testing.T) {
	ctx := context.Background()
	c := cluster.Start(t)
	objs := renderChart(t)
	addr := cluster.FreeAddr(t, "127.0.0.1")
	urlClientConfig(t, objs, addr)
	applyChart(t, c, objs)
	injector := startInjector(t, c, objs, addr)
	waitCABundle(t, c)
	markDeploymentReady(t, c)

	enabled := map[string]string{inject.NamespaceLabel: inject.NamespaceLabelValue}
	c.CreateNamespace(t, "s11-on", enabled)
	c.CreateNamespace(t, "s11-late", nil)
	waitWebhookCalled(t, c, "s11-on")
	// A router created before its namespace was labelled has no sidecar.
	late, err := c.Client().CoreV1().Pods("s11-late").Create(ctx, routerPod("router-0", map[string]string{"app": "router"}, nil), metav1.CreateOptions{})
	if err != nil || sidecarOf(late) != nil {
		t.Fatalf("router in the unlabelled namespace: %v (sidecar %v)", err, sidecarOf(late) != nil)
	}
	setNamespaceLabel(t, c, "s11-late", inject.NamespaceLabelValue)
	on, err := c.Client().CoreV1().Pods("s11-on").Create(ctx, routerPod("router-0", map[string]string{"app": "router"}, nil), metav1.CreateOptions{})
	if err != nil || sidecarOf(on) == nil {
		t.Fatalf("router in the labelled namespace: %v", err)
	}
	waitRoleBinding(t, c, "s11-on", true, "router")

	admin := "--kubeconfig=" + c.KubeconfigPath()
	t.Run("healthy install, one pod without its sidecar", func(t *testing.T) {
		lines, out, code := checkLines(t, admin)
		t.Logf("tether-injector check:\n%s", out)
		if code != 1 {
			t.Fatalf("exit status %d, want 1", code)
		}
		wantLine(t, lines, out, "injector", true, "Deployment tether-system/tether-injector: 2 of 2 replicas ready", "self-managed certificates")
		wantLine(t, lines, out, "webhook", true, "ns.inject.tether.dev (failurePolicy Fail)", "pod.inject.tether.dev", "caBundle set")
		wantLine(t, lines, out, "certificate", true, "Secret tether-system/tether-injector-tls", "trusted by the caBundle of every entry", "(in 364 days)")
		wantLine(t, lines, out, "admission", true, "the API server called the webhook: a dry-run pod in namespace s11-late got the tether-sidecar container")
		wantLine(t, lines, out, "namespaces", true, "injection enabled in s11-late, s11-on")
		wantLine(t, lines, out, "pods", false, "1 pods ask for the sidecar", "s11-late/router-0", "kubectl -n s11-late delete pod router-0")
		wantLine(t, lines, out, "rbac", true, "service account tether-system/tether-injector may keep Secret tether-injector-tls")
		wantLine(t, lines, out, "sidecar-rbac", true, "s11-on/router")
		if !strings.Contains(out, "1 of 8 checks failed") {
			t.Fatalf("no summary:\n%s", out)
		}
		// Nothing was stored by the admission check.
		pods, err := c.Client().CoreV1().Pods("s11-late").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("pods of s11-late: %v %d", err, len(pods.Items))
		}
	})

	t.Run("the pod restarted", func(t *testing.T) {
		if err := c.Client().CoreV1().Pods("s11-late").Delete(ctx, "router-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client().CoreV1().Pods("s11-late").Create(ctx, routerPod("router-0", map[string]string{"app": "router"}, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		lines, out, code := checkLines(t, admin, "--checks=pods,namespaces")
		if code != 0 || len(lines) != 2 {
			t.Fatalf("exit status %d:\n%s", code, out)
		}
		wantLine(t, lines, out, "pods", true, "2 pods have the sidecar")
	})

	t.Run("offline injection", func(t *testing.T) {
		checkOfflineInjection(t, c, objs, on)
	})

	// The chart's helm test: its pod's arguments, as its service account.
	var testPod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findObject(t, objs, "Pod", "tether-test").Object, &testPod); err != nil {
		t.Fatal(err)
	}
	helmTest := func() (string, int) {
		args := append(slices.Clone(testPod.Spec.Containers[0].Args),
			"--kubeconfig="+c.ServiceAccountKubeconfig(t, chartNamespace, testPod.Spec.ServiceAccountName))
		out, errb, code := runInjectorCommand(t, nil, args...)
		return out + errb, code
	}
	t.Run("helm test", func(t *testing.T) {
		out, code := helmTest()
		t.Logf("helm test pod:\n%s", out)
		if code != 0 || !strings.Contains(out, "OK   admission: the webhook at https://"+addr+"/mutate (TLS verified against the caBundle of ns.inject.tether.dev) answered with the tether-sidecar container") {
			t.Fatalf("exit status %d:\n%s", code, out)
		}
	})

	t.Run("a labelled namespace that is never injected", func(t *testing.T) {
		setNamespaceLabel(t, c, "kube-system", inject.NamespaceLabelValue)
		defer setNamespaceLabel(t, c, "kube-system", "")
		lines, out, code := checkLines(t, admin, "--checks=namespaces")
		if code != 1 {
			t.Fatalf("exit status %d:\n%s", code, out)
		}
		wantLine(t, lines, out, "namespaces", false, "namespaces kube-system are labelled tether.dev/injection=enabled but never injected")
	})

	t.Run("the injector's ClusterRoleBinding removed", func(t *testing.T) {
		if err := c.Client().RbacV1().ClusterRoleBindings().Delete(ctx, injectorName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 30*time.Second, "the rbac check to fail", func() error {
			lines, out, code := checkLines(t, admin, "--checks=rbac")
			if code != 1 || !strings.HasPrefix(lines["rbac"], "FAIL rbac: ") {
				return fmt.Errorf("exit %d:\n%s", code, out)
			}
			wantLine(t, lines, out, "rbac", false, "may not get mutatingwebhookconfigurations.admissionregistration.k8s.io tether-injector",
				"list pods", "bind clusterroles.rbac.authorization.k8s.io tether-sidecar", "re-apply the chart's RBAC")
			if strings.Contains(lines["rbac"], "get secrets") {
				t.Fatalf("the Role (still bound) reported missing: %s", lines["rbac"])
			}
			return nil
		})
	})

	t.Run("a caBundle of another CA, the injector stopped", func(t *testing.T) {
		injector.Stop()
		other, err := certs.NewCA("another-ca", time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		mwcs := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations()
		mwc, err := mwcs.Get(ctx, injectorName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range mwc.Webhooks {
			mwc.Webhooks[i].ClientConfig.CABundle = other.CertPEM
		}
		if _, err := mwcs.Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		lines, out, code := checkLines(t, admin, "--checks=webhook,certificate,admission")
		t.Logf("tether-injector check:\n%s", out)
		if code != 1 {
			t.Fatalf("exit status %d", code)
		}
		wantLine(t, lines, out, "webhook", true)
		wantLine(t, lines, out, "certificate", false, "the caBundle of ns.inject.tether.dev does not trust it for 127.0.0.1", "certificate signed by unknown authority")
		wantLine(t, lines, out, "admission", false, "a dry-run pod in namespace s11-late was refused", "failed calling webhook")
		out, code = helmTest()
		if code != 1 || !strings.Contains(out, "FAIL admission: the webhook at https://"+addr+"/mutate does not answer") {
			t.Fatalf("helm test with the injector stopped: exit status %d:\n%s", code, out)
		}
	})
}

// checkOfflineInjection: a pod manifest injected by `tether-injector
// inject` (with the chart's sidecar flags) is stored as it is, the
// webhook finding it already injected, and its sidecar is the one the
// webhook gave the same pod (webhookPod).
func checkOfflineInjection(t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured, webhookPod *corev1.Pod) {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findObject(t, objs, "Deployment", injectorName).Object, &d); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if slices.Contains(app.SidecarFlags, name) {
			args = append(args, a)
		}
	}
	offline := routerPod("router-offline", map[string]string{"app": "router"}, nil)
	offline.APIVersion, offline.Kind = "v1", "Pod"
	manifest, err := yaml.Marshal(offline)
	if err != nil {
		t.Fatal(err)
	}
	out, errb, code := runInjectorCommand(t, manifest, append([]string{"inject", "-f", "-", "--namespace=s11-on"}, args...)...)
	if code != 0 || !strings.Contains(errb, "Pod/router-offline (namespace s11-on): injected") {
		t.Fatalf("inject: exit status %d: %s", code, errb)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(out), &pod); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	stored, err := c.Client().CoreV1().Pods("s11-on").Create(context.Background(), &pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, cs := range [][]corev1.Container{stored.Spec.InitContainers, stored.Spec.Containers} {
		for _, ct := range cs {
			if ct.Name == inject.ContainerName {
				n++
			}
		}
	}
	if n != 1 || stored.Annotations[inject.AnnotationStatus] != pod.Annotations[inject.AnnotationStatus] {
		t.Fatalf("stored pod: %d sidecars, status %q (offline %q)", n, stored.Annotations[inject.AnnotationStatus], pod.Annotations[inject.AnnotationStatus])
	}
	got, want := sidecarOf(stored), sidecarOf(webhookPod)
	if got.Image != want.Image || !slices.Equal(got.Args, want.Args) || fmt.Sprint(got.Env) != fmt.Sprint(want.Env) ||
		fmt.Sprint(got.Resources) != fmt.Sprint(want.Resources) || fmt.Sprint(got.SecurityContext) != fmt.Sprint(want.SecurityContext) ||
		fmt.Sprint(got.VolumeMounts) != fmt.Sprint(want.VolumeMounts) || fmt.Sprint(got.StartupProbe) != fmt.Sprint(want.StartupProbe) {
		t.Fatalf("offline sidecar differs from the webhook's:\noffline: %+v\nwebhook: %+v", got, want)
	}
}
