package modelserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/resolve"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readyPod is a Running, Ready model-server pod.
func readyPod(name, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name, UID: types.UID("uid-" + name), Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Ports: []corev1.ContainerPort{{ContainerPort: 8000}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// fixture is a Source over fake clients; its watches signal when they
// start (the fakes have no resource versions: an event written between an
// informer's list and its watch would be lost).
type fixture struct {
	src      *Source
	dyn      *dynamicfake.FakeDynamicClient
	reg      *prometheus.Registry
	logs     *testkit.SyncBuffer
	watching chan struct{}
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	kube := fake.NewClientset(
		readyPod("ds-0", "10.0.0.1", map[string]string{"app": "ds"}),
		readyPod("ds-1", "10.0.0.2", map[string]string{"app": "ds"}),
		readyPod("v2-0", "10.0.1.1", map[string]string{"app": "v2"}),
	)
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{GVR: "ModelServerList"}, objs...)
	f := &fixture{dyn: dyn, reg: prometheus.NewRegistry(), logs: &testkit.SyncBuffer{}, watching: make(chan struct{}, 1)}
	dyn.PrependWatchReactor("modelservers", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := dyn.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err == nil {
			f.watching <- struct{}{}
		}
		return true, w, err
	})
	src, err := New(Options{
		Pool: "chat", Ref: config.ModelServerRef{Name: "ds"}, Namespace: "llm", Dynamic: dyn, Kube: kube,
		Keys:    func(s *config.SessionSticky) resolve.Extractor { return session.NewExtractor(s.Sources, nil) },
		HaveJWT: false, HaveTokens: false, Reg: f.reg, Log: slog.New(slog.NewJSONHandler(f.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.src = src
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.Eventually(t, 10*time.Second, "synced", src.Synced)
	select {
	case <-f.watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the informer never watched")
	}
	return f
}

func modelServer(t testing.TB, spec string) *unstructured.Unstructured {
	t.Helper()
	u := object(t, header+"spec:\n"+spec)
	u.SetResourceVersion("")
	return u
}

const sticky = `  workloadSelector: {matchLabels: {app: ds}}
  workloadPort: {port: 8000}
  model: m1
  trafficPolicy:
    timeout: 5s
    sessionSticky:
      sessionAffinitySeconds: 60
      sources: [{type: Header, name: X-Session-ID}]
`

func (f *fixture) names() string {
	var s []string
	for _, b := range f.src.Current().Backends {
		s = append(s, b.Name)
	}
	return strings.Join(s, ",")
}

func (f *fixture) update(t *testing.T, spec string) {
	t.Helper()
	if _, err := f.dyn.Resource(GVR).Namespace("llm").Update(context.Background(), modelServer(t, spec), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSourceFollowsTheObject: the pool is what the ModelServer says now:
// its pods, sources, TTL, timeout and model; an edit of the selector
// swaps the pods, an edit that removes sessionSticky makes the pool
// non-sticky, an invalid edit is refused (the previous version stays),
// a deletion takes the pool down with a clear error, and a new object
// brings it back, all without a restart.
func TestSourceFollowsTheObject(t *testing.T) {
	f := newFixture(t, modelServer(t, sticky))
	if got := f.names(); got != "llm/ds-0,llm/ds-1" {
		t.Fatalf("backends %q", got)
	}
	pol := f.src.Policy()
	if pol.Keys == nil || pol.TTL != time.Minute || pol.Timeout != 5*time.Second || pol.Down != nil || !f.src.Serves("m1") || f.src.Serves("m2") {
		t.Fatalf("policy %+v, serves m1 %v", pol, f.src.Serves("m1"))
	}
	if v := testutil.ToFloat64(f.src.m.available); v != 1 {
		t.Fatalf("tether_model_server_available = %v", v)
	}
	if n, err := testkit.FindMetric(f.reg, "tether_backends_selectable", "role", "backend"); err != nil || n != 2 {
		t.Fatalf("tether_backends_selectable{role=backend} = %v, %v", n, err)
	}

	// Another selector and model, and no sessionSticky: a plain pool.
	f.update(t, "  workloadSelector: {matchLabels: {app: v2}}\n  workloadPort: {port: 8000}\n  model: m2\n")
	testkit.Eventually(t, 10*time.Second, "the new selector's pods", func() bool { return f.names() == "llm/v2-0" })
	if pol := f.src.Policy(); pol.Keys != nil || pol.Timeout != 0 || !f.src.Serves("m2") {
		t.Fatalf("after the edit: policy %+v, serves m2 %v", pol, f.src.Serves("m2"))
	}

	// An invalid edit is refused; the previous version keeps serving.
	f.update(t, "  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: 0}\n")
	// The count comes before the log line: wait for both.
	const refusal = "spec.workloadPort.port: must be 1..65535, got 0"
	testkit.Eventually(t, 10*time.Second, "the invalid edit counted and its refusal logged with its field", func() error {
		if n := testutil.ToFloat64(f.src.m.updates.WithLabelValues(eventInvalid)); n != 1 {
			return fmt.Errorf("%v invalid versions counted", n)
		}
		if logs := f.logs.String(); !strings.Contains(logs, refusal) {
			return fmt.Errorf("the refusal is not logged with its field:\n%s", logs)
		}
		return nil
	})
	if f.names() != "llm/v2-0" || f.src.Policy().Down != nil {
		t.Fatalf("an invalid edit changed the pool: %q %+v", f.names(), f.src.Policy())
	}

	// Deleted: the pool is down, with a reason that names the object.
	if err := f.dyn.Resource(GVR).Namespace("llm").Delete(context.Background(), "ds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "down", func() bool { return f.src.Policy().Down != nil })
	if err := f.src.Policy().Down; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "ModelServer llm/ds does not exist") {
		t.Fatalf("down error %v", err)
	}
	if f.src.Current().Len() != 0 || f.src.Definition() != nil || testutil.ToFloat64(f.src.m.available) != 0 {
		t.Fatal("a deleted ModelServer's pool still has backends")
	}
	if !f.src.Serves("m2") {
		t.Fatal("a deleted ModelServer's model must still pick its pool (for its 503)")
	}
	if !strings.Contains(f.logs.String(), "ModelServer not found: the pool answers 503") {
		t.Fatalf("no log line for the deletion:\n%s", f.logs)
	}

	// Created again.
	if _, err := f.dyn.Resource(GVR).Namespace("llm").Create(context.Background(), modelServer(t, sticky), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "back", func() bool { return f.src.Policy().Down == nil && f.names() == "llm/ds-0,llm/ds-1" })
}

// TestSourceWithoutTheObject: a ModelServer that does not exist yet
// leaves the pool synced (the sidecar becomes ready) but down, with a 503
// reason naming it; an invalid first version is down with its field error.
func TestSourceWithoutTheObject(t *testing.T) {
	f := newFixture(t)
	if err := f.src.Policy().Down; err == nil || !strings.Contains(err.Error(), "ModelServer llm/ds does not exist") {
		t.Fatalf("down error %v", err)
	}
	if _, err := f.dyn.Resource(GVR).Namespace("llm").Create(context.Background(), modelServer(t, sticky), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "up", func() bool { return f.src.Policy().Down == nil })

	zero := strings.Replace(sticky, "sessionAffinitySeconds: 60", "sessionAffinitySeconds: 0", 1)
	g := newFixture(t, modelServer(t, zero))
	err := g.src.Policy().Down
	if err == nil || !strings.Contains(err.Error(), "spec.trafficPolicy.sessionSticky.sessionAffinitySeconds: must be at least 1 when set, got 0") {
		t.Fatalf("explicit TTL 0: down error %v", err)
	}
}
