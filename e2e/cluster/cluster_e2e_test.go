//go:build e2e

package cluster

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
		Eventually(t, 30*time.Second, "role to take effect", func() error {
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
