//go:build e2e

package cluster

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestControlPlane checks the harness itself: the apiserver serves with
// RBAC on, service-account tokens are authorized by RBAC, the kubelet
// stand-in writes status, and nothing outlives the test.
func TestControlPlane(t *testing.T) {
	var pids []int
	var dir string
	t.Run("cluster", func(t *testing.T) {
		c := Start(t)
		pids = []int{c.etcd.Pid(), c.apiserver.Pid()}
		dir = c.Dir()
		ctx := context.Background()

		v, err := c.Client().Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kube-apiserver %s at %s", v.GitVersion, c.URL)
		if _, err := os.Stat(c.KubeconfigPath()); err != nil {
			t.Fatal(err)
		}

		c.CreateNamespace(t, "llm", nil)
		cs, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, "llm", "router"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Pods("llm").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("list pods without a role: err = %v, want Forbidden (is RBAC on?)", err)
		}
		c.PodReaderRole(t, "llm", "router")
		testkit.Eventually(t, 30*time.Second, "role to take effect", func() error {
			_, err := cs.CoreV1().Pods("llm").List(ctx, metav1.ListOptions{})
			return err
		})
		if _, err := cs.CoreV1().Secrets("llm").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("list secrets with the pod reader role: err = %v, want Forbidden", err)
		}

		pod, err := c.StartPod(ctx, PodSpec{Namespace: "llm", Name: "ds-0", Labels: map[string]string{"app": "ds"}, Port: 8000}, "127.0.0.9")
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP != "127.0.0.9" || !ready(pod) {
			t.Fatalf("after MakeReady: %+v", pod.Status)
		}
		pod, err = c.SetNotReady(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if ready(pod) {
			t.Fatal("still ready after SetNotReady")
		}
		// With nodeName set the pod would wait for a kubelet; DeletePod confirms.
		held, err := c.CreatePod(ctx, PodSpec{Namespace: "llm", Name: "held", Port: 8000, NodeName: "node-1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeletePod(ctx, held); err != nil {
			t.Fatal(err)
		}
		if err := c.DeletePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after the test: %v", pid, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("scratch dir %s left behind: %v", dir, err)
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestEgressGuard proves the apiserver cannot leave loopback: a webhook
// that points at a Service name (which the apiserver would resolve and
// dial) is refused by the harness's proxy, so the pod is rejected and no
// packet goes anywhere but 127.0.0.1.
func TestEgressGuard(t *testing.T) {
	c := Start(t)
	c.AllowEgressAttempts()
	ctx := context.Background()
	c.CreateNamespace(t, "guarded", map[string]string{"egress-test": "on"})
	c.CreateNamespace(t, "nowhere", nil)
	// The Service must exist: the apiserver resolves the reference to
	// webhook.nowhere.svc only then (and would dial that name).
	if _, err := c.Client().CoreV1().Services("nowhere").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	port := int32(443)
	path := "/mutate"
	_, err := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-test"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "egress.test.tether.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "nowhere", Name: "webhook", Port: &port, Path: &path}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"egress-test": "on"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "guarded"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	// The webhook configuration reaches the admission plugin's cache
	// asynchronously: retry until the call is attempted.
	deadline := time.Now().Add(30 * time.Second)
	for len(c.EgressAttempts()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the apiserver never tried the Service-referenced webhook")
		}
		_, err := c.Client().CoreV1().Pods("guarded").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		t.Logf("pod rejected: %v", err)
	}
	// The apiserver resolves the Service to its cluster IP and dials that:
	// the guard saw (and refused) a CONNECT to it on the Service's port.
	for _, a := range c.EgressAttempts() {
		if !strings.HasPrefix(a, "CONNECT ") || !strings.Contains(a, ":443 ") {
			t.Fatalf("unexpected egress attempt %q", a)
		}
	}
}
