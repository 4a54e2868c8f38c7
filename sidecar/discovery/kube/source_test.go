package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClient is a fake clientset whose watches signal when they start: the
// fake's watch has no resource versions, so an event written between an
// informer's list and its watch would be lost and the test would flake.
func fakeClient(t *testing.T, wantWatches int, objs ...runtime.Object) (*fake.Clientset, func()) {
	c := fake.NewClientset(objs...)
	var wg sync.WaitGroup
	wg.Add(wantWatches)
	c.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err == nil {
			defer wg.Done()
		}
		return true, w, err
	})
	return c, wg.Wait
}

func names(bs []discovery.Backend) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.Name)
	}
	return strings.Join(s, ",")
}

func run(t *testing.T, s *Source) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestSourceFollowsPods(t *testing.T) {
	client, watching := fakeClient(t, 1, pod("ds-0", "10.0.0.1"), pod("ds-1", "10.0.0.2", setReady(corev1.ConditionFalse)))
	reg := prometheus.NewRegistry()
	s, err := NewSource(client, config.Backends{Kubernetes: &config.KubeSelector{Selector: "app=ds", Port: 8000}}, "llm", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Synced() || s.Current() == nil || s.Current().Len() != 0 {
		t.Fatal("before Run: want not synced and an empty, non-nil set")
	}
	run(t, s)
	testkit.Eventually(t, 10*time.Second, "sync", s.Synced)
	watching()
	if got := names(s.Current().Backends); got != "llm/ds-0" {
		t.Fatalf("after sync: %q, want llm/ds-0", got)
	}
	if v := testutil.ToFloat64(s.selectable.WithLabelValues(RoleBackend)); v != 1 {
		t.Fatalf("tether_backends_selectable = %v, want 1", v)
	}

	ctx := context.Background()
	pods := client.CoreV1().Pods("llm")
	// ds-1 becomes ready; ds-2 is added.
	if _, err := pods.UpdateStatus(ctx, pod("ds-1", "10.0.0.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod("ds-2", "10.0.0.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "three backends", func() bool { return names(s.Current().Backends) == "llm/ds-0,llm/ds-1,llm/ds-2" })

	// ds-0 goes NotReady; ds-2 is deleted.
	if _, err := pods.UpdateStatus(ctx, pod("ds-0", "10.0.0.1", setReady(corev1.ConditionFalse)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "ds-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "only ds-1", func() bool { return names(s.Current().Backends) == "llm/ds-1" })
	if _, ok := s.Current().Get("llm/ds-0/uid-ds-0"); ok {
		t.Fatal("a not-ready pod is still in the set")
	}

	// ds-1 is recreated under the same name: a new UID, a new backend.
	if err := pods.Delete(ctx, "ds-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod("ds-1", "10.0.0.9", func(p *corev1.Pod) { p.UID = "uid-ds-1-again" }), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "recreated ds-1", func() bool {
		_, ok := s.Current().Get("llm/ds-1/uid-ds-1-again")
		return ok
	})
	if _, ok := s.Current().Get("llm/ds-1/uid-ds-1"); ok {
		t.Fatal("the old incarnation of ds-1 is still selectable")
	}
}

func TestSourcePD(t *testing.T) {
	labels := func(role, group string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": "ds", "role": role}
			if group != "" {
				p.Labels["pd-group"] = group
			}
		}
	}
	client, watching := fakeClient(t, 2,
		pod("p-a", "10.0.1.1", labels("prefill", "a")),
		pod("p-b", "10.0.1.2", labels("prefill", "b")),
		pod("p-none", "10.0.1.3", labels("prefill", "")),
		pod("d-a", "10.0.2.1", labels("decode", "a")),
	)
	b := config.Backends{
		Prefill:    &config.KubeSelector{Selector: "app=ds,role=prefill", Port: 8000},
		Decode:     &config.KubeSelector{Selector: "app=ds,role=decode", Port: 8000, Namespace: "llm"},
		GroupLabel: "pd-group",
	}
	s, err := NewSource(client, b, "llm", prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	testkit.Eventually(t, 10*time.Second, "sync", s.Synced)
	watching()
	set := s.Current()
	if got := names(set.Prefill); got != "llm/p-a,llm/p-b" {
		t.Fatalf("prefill = %q, want llm/p-a,llm/p-b (p-none has no group)", got)
	}
	if got := names(set.Backends); got != "llm/d-a" {
		t.Fatalf("decode = %q", got)
	}
	if set.Prefill[0].Group != "a" || set.Prefill[1].Group != "b" || set.Backends[0].Group != "a" {
		t.Fatalf("groups: %+v %+v", set.Prefill, set.Backends)
	}

	// Losing a prefill pod removes it from Prefill only.
	if err := client.CoreV1().Pods("llm").Delete(context.Background(), "p-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "p-a gone", func() bool { return names(s.Current().Prefill) == "llm/p-b" })
	if names(s.Current().Backends) != "llm/d-a" {
		t.Fatal("decode side changed")
	}
}

func TestNewSourceErrors(t *testing.T) {
	client := fake.NewClientset()
	sel := &config.KubeSelector{Selector: "app=ds", Port: 8000}
	cases := []struct {
		name string
		b    config.Backends
		ns   string
		want string
	}{
		{"no namespace anywhere", config.Backends{Kubernetes: sel}, "", "POD_NAMESPACE"},
		{"bad selector", config.Backends{Kubernetes: &config.KubeSelector{Selector: "app in (", Port: 1}}, "llm", "selector"},
		{"half a PD pool", config.Backends{Prefill: sel}, "llm", "both prefill and decode"},
		{"static pool", config.Backends{Static: []string{"127.0.0.1:1"}}, "llm", "no kubernetes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewSource(client, c.b, c.ns, nil, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, c.want)
			}
		})
	}
	// Two pools on one unwrapped registry collide loudly, not silently.
	reg := prometheus.NewRegistry()
	if _, err := NewSource(client, config.Backends{Kubernetes: sel}, "llm", reg, nil); err != nil {
		t.Fatal(err)
	}
	_, err := NewSource(client, config.Backends{Kubernetes: sel}, "llm", reg, nil)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second registration: %v, want AlreadyRegisteredError", err)
	}
	// Wrapped with the pool label, they coexist.
	for _, p := range []string{"a", "b"} {
		if _, err := NewSource(client, config.Backends{Kubernetes: sel}, "llm",
			prometheus.WrapRegistererWith(prometheus.Labels{"pool": p}, prometheus.NewRegistry()), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// The ordering is by ID so every replica sees the same list.
func TestBackendsSorted(t *testing.T) {
	client, watching := fakeClient(t, 1, pod("c", "10.0.0.3"), pod("a", "10.0.0.1"), pod("b", "10.0.0.2"))
	s, err := NewSource(client, config.Backends{Kubernetes: &config.KubeSelector{Selector: "app=ds", Port: 8000}}, "llm", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	testkit.Eventually(t, 10*time.Second, "sync", s.Synced)
	watching()
	ids := []string{}
	for _, b := range s.Current().Backends {
		ids = append(ids, b.ID)
	}
	if !slices.IsSorted(ids) || len(ids) != 3 {
		t.Fatalf("ids = %v", ids)
	}
}
