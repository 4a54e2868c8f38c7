package kube

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tetherproxy/tether/sidecar/config"
)

var (
	readyAt   = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	startedAt = readyAt.Add(-30 * time.Second) // the model server's container started before it was ready
)

// pod is a Running, Ready pod with IP ip; opts adjust it.
func pod(name, ip string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "llm", Name: name, UID: types.UID("uid-" + name),
			Labels:            map[string]string{"app": "ds"},
			CreationTimestamp: metav1.NewTime(readyAt.Add(-time.Minute)),
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "vllm",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}, {Name: "http", ContainerPort: 8000}},
		}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			PodIP: ip,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readyAt)},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "vllm", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
			}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func setReady(s corev1.ConditionStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Conditions[1].Status = s }
}

func TestSelectable(t *testing.T) {
	now := metav1.Now()
	cases := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"running and ready", pod("a", "10.0.0.1"), true},
		{"no ip", pod("a", ""), false},
		{"pending", pod("a", "10.0.0.1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), false},
		{"succeeded", pod("a", "10.0.0.1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false},
		{"failed (evicted)", pod("a", "10.0.0.1", func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
		}), false},
		{"not ready", pod("a", "10.0.0.1", setReady(corev1.ConditionFalse)), false},
		{"ready unknown", pod("a", "10.0.0.1", setReady(corev1.ConditionUnknown)), false},
		{"no ready condition", pod("a", "10.0.0.1", func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[:1] }), false},
		{"terminating but still ready", pod("a", "10.0.0.1", func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := selectable(c.pod); got != c.want {
				t.Fatalf("selectable = %v, want %v", got, c.want)
			}
		})
	}
}

func TestBackendOf(t *testing.T) {
	byNumber := config.KubeSelector{Selector: "app=ds", Port: 8000}
	byName := config.KubeSelector{Selector: "app=ds", PortName: "http"}

	b, ok := backendOf(pod("ds-0", "10.0.0.7"), byNumber, "")
	if !ok {
		t.Fatal("ready pod not a backend")
	}
	if b.ID != "llm/ds-0/uid-ds-0" || b.Name != "llm/ds-0" || b.Addr != "10.0.0.7:8000" || b.Group != "" {
		t.Fatalf("backend = %+v", b)
	}
	if !b.Since.Equal(startedAt) {
		t.Fatalf("Since = %v, want the serving container's startedAt %v", b.Since, startedAt)
	}

	t.Run("port by name", func(t *testing.T) {
		b, ok := backendOf(pod("ds-0", "10.0.0.7"), byName, "")
		if !ok || b.Addr != "10.0.0.7:8000" {
			t.Fatalf("backend = %+v, %v; want addr 10.0.0.7:8000", b, ok)
		}
	})
	t.Run("port name in a native sidecar", func(t *testing.T) {
		p := pod("ds-0", "10.0.0.7", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "side", Ports: []corev1.ContainerPort{{Name: "side", ContainerPort: 7000}}}}
		})
		b, ok := backendOf(p, config.KubeSelector{Selector: "app=ds", PortName: "side"}, "")
		if !ok || b.Addr != "10.0.0.7:7000" {
			t.Fatalf("backend = %+v, %v", b, ok)
		}
	})
	t.Run("missing port name", func(t *testing.T) {
		if _, ok := backendOf(pod("ds-0", "10.0.0.7"), config.KubeSelector{Selector: "app=ds", PortName: "grpc"}, ""); ok {
			t.Fatal("a pod without the named port must not be a backend")
		}
	})
	t.Run("ipv6", func(t *testing.T) {
		b, ok := backendOf(pod("ds-0", "fd00::7"), byNumber, "")
		if !ok || b.Addr != "[fd00::7]:8000" {
			t.Fatalf("backend = %+v, %v", b, ok)
		}
	})
	t.Run("not selectable", func(t *testing.T) {
		if _, ok := backendOf(pod("ds-0", "10.0.0.7", setReady(corev1.ConditionFalse)), byNumber, ""); ok {
			t.Fatal("not-ready pod is a backend")
		}
	})
	t.Run("recreated under the same name is a new backend", func(t *testing.T) {
		again := pod("ds-0", "10.0.0.7", func(p *corev1.Pod) { p.UID = "uid-2" })
		b2, _ := backendOf(again, byNumber, "")
		if b2.ID == b.ID || b2.Name != b.Name {
			t.Fatalf("recreated pod: ID %q (old %q), Name %q (old %q)", b2.ID, b.ID, b2.Name, b.Name)
		}
	})
	t.Run("since falls back to creation", func(t *testing.T) {
		p := pod("ds-0", "10.0.0.7", func(p *corev1.Pod) { p.Status.ContainerStatuses = nil })
		b, _ := backendOf(p, byNumber, "")
		if !b.Since.Equal(p.CreationTimestamp.Time) {
			t.Fatalf("Since = %v, want creation %v", b.Since, p.CreationTimestamp)
		}
	})
}

// TestSinceFollowsTheServingContainer: Since moves when the model
// server's container restarts, never on a readiness blip, and not when
// another container of the pod restarts.
func TestSinceFollowsTheServingContainer(t *testing.T) {
	sel := config.KubeSelector{Selector: "app=ds", Port: 8000}
	later := readyAt.Add(time.Hour)
	withSidecar := func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "log-shipper"})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: "log-shipper", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
		})
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want time.Time
	}{
		{"readiness blip: Ready went false and true again", pod("ds-0", "10.0.0.7", func(p *corev1.Pod) {
			p.Status.Conditions[1].LastTransitionTime = metav1.NewTime(later)
		}), startedAt},
		{"serving container restarted", pod("ds-0", "10.0.0.7", func(p *corev1.Pod) {
			cs := &p.Status.ContainerStatuses[0]
			cs.RestartCount = 1
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
			cs.State.Running.StartedAt = metav1.NewTime(later)
		}), later},
		{"another container restarted", pod("ds-0", "10.0.0.7", withSidecar, func(p *corev1.Pod) {
			cs := &p.Status.ContainerStatuses[1]
			cs.RestartCount = 3
			cs.State.Running.StartedAt = metav1.NewTime(later)
		}), startedAt},
		{"no container declares the port: every app container counts", pod("ds-0", "10.0.0.7", withSidecar, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = nil
			p.Status.ContainerStatuses[1].State.Running.StartedAt = metav1.NewTime(later)
		}), later},
		{"a native sidecar that serves the port", pod("ds-0", "10.0.0.7", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = nil
			p.Spec.InitContainers = []corev1.Container{{Name: "server", Ports: []corev1.ContainerPort{{ContainerPort: 8000}}}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{
				Name: "server", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(later)}},
			}}
		}), later},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, ok := backendOf(c.pod, sel, "")
			if !ok {
				t.Fatal("not a backend")
			}
			if !b.Since.Equal(c.want) {
				t.Fatalf("Since = %v, want %v", b.Since, c.want)
			}
		})
	}
}

func TestBackendOfGroups(t *testing.T) {
	sel := config.KubeSelector{Selector: "app=ds", Port: 8000}
	inGroup := func(g string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Labels["pd-group"] = g } }

	b, ok := backendOf(pod("p-0", "10.0.0.1", inGroup("g1")), sel, "pd-group")
	if !ok || b.Group != "g1" {
		t.Fatalf("backend = %+v, %v; want group g1", b, ok)
	}
	if _, ok := backendOf(pod("p-1", "10.0.0.2"), sel, "pd-group"); ok {
		t.Fatal("a PD pod without the group label must not be selectable: it could only pair across groups")
	}
	if _, ok := backendOf(pod("p-2", "10.0.0.3", inGroup("")), sel, "pd-group"); ok {
		t.Fatal("an empty group label value must not be selectable")
	}
	if b, ok := backendOf(pod("p-3", "10.0.0.4"), sel, ""); !ok || b.Group != "" {
		t.Fatalf("without a group label every pod is in group \"\": %+v, %v", b, ok)
	}
}
