package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// The kubelet stand-in: there is no kubelet, so the test writes the status
// a kubelet would, through the status subresource, as the real one does.

// MakeReady marks a pod Running and Ready on ip (a 127.0.0.x address where
// the test runs the pod's process), its containers running and ready. The
// Ready condition's lastTransitionTime moves only when the condition
// changes, and a container's state.running.startedAt only when it starts
// (see RestartContainers), as a kubelet's do: discovery dates a server's
// current run from startedAt.
func (c *Cluster) MakeReady(ctx context.Context, pod *corev1.Pod, ip string) (*corev1.Pod, error) {
	return c.writeStatus(ctx, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		setContainers(p, true, now, false)
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		p.Status.HostIP = "127.0.0.1"
		p.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		setCondition(p, corev1.PodScheduled, corev1.ConditionTrue, now)
		setCondition(p, corev1.PodInitialized, corev1.ConditionTrue, now)
		setCondition(p, corev1.ContainersReady, corev1.ConditionTrue, now)
		setCondition(p, corev1.PodReady, corev1.ConditionTrue, now)
	})
}

// SetNotReady keeps a pod Running with its IP but turns Ready false, as a
// kubelet does when a readiness probe fails: the containers keep running.
func (c *Cluster) SetNotReady(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	return c.writeStatus(ctx, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		setContainers(p, false, now, false)
		setCondition(p, corev1.ContainersReady, corev1.ConditionFalse, now)
		setCondition(p, corev1.PodReady, corev1.ConditionFalse, now)
	})
}

// RestartContainers records what a kubelet reports after the pod's
// containers crashed and were restarted in place (same pod, same UID):
// restartCount up by one, a new state.running.startedAt, the last state
// terminated, the pod Ready again.
func (c *Cluster) RestartContainers(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	return c.writeStatus(ctx, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		setContainers(p, true, now, true)
		setCondition(p, corev1.ContainersReady, corev1.ConditionTrue, now)
		setCondition(p, corev1.PodReady, corev1.ConditionTrue, now)
	})
}

// setContainers writes a running status for every container of the spec:
// started now when it was not running (or restarted), otherwise as it was.
func setContainers(p *corev1.Pod, ready bool, now metav1.Time, restarted bool) {
	old := map[string]corev1.ContainerStatus{}
	for _, cs := range p.Status.ContainerStatuses {
		old[cs.Name] = cs
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		cs, ok := old[c.Name]
		if !ok {
			cs = corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: "e2e://" + p.Name + "/" + c.Name}
		}
		if restarted {
			cs.RestartCount++
			if r := cs.State.Running; r != nil {
				cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Reason: "Error", StartedAt: r.StartedAt, FinishedAt: now}}
			}
			cs.State = corev1.ContainerState{}
		}
		if cs.State.Running == nil {
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		}
		started := true
		cs.Ready, cs.Started = ready, &started
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
	}
}

func (c *Cluster) writeStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != "" && cur.UID != pod.UID {
			return fmt.Errorf("pod %s/%s was recreated (uid %s, want %s)", pod.Namespace, pod.Name, cur.UID, pod.UID)
		}
		mutate(cur)
		out, err = c.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

func setCondition(p *corev1.Pod, typ corev1.PodConditionType, status corev1.ConditionStatus, now metav1.Time) {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == typ {
			if c.Status != status {
				c.Status, c.LastTransitionTime = status, now
			}
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: now})
}

// PodSpec describes a model-server pod for NewPod.
type PodSpec struct {
	Namespace, Name string
	Labels          map[string]string
	// Port is the container port, named "http".
	Port int32
	// NodeName, when set, makes deletion wait for a kubelet's confirmation
	// (a terminating pod stays until ForceDelete); unset, a delete removes
	// the pod at once.
	NodeName string
}

// CreatePod creates a pending pod as a Deployment or StatefulSet would.
func (c *Cluster) CreatePod(ctx context.Context, s PodSpec) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels},
		Spec: corev1.PodSpec{
			NodeName: s.NodeName,
			Containers: []corev1.Container{{
				Name:  "model",
				Image: "modelsim:e2e",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: s.Port}},
			}},
		},
	}
	return c.client.CoreV1().Pods(s.Namespace).Create(ctx, pod, metav1.CreateOptions{})
}

// StartPod creates a pod and marks it ready on ip.
func (c *Cluster) StartPod(ctx context.Context, s PodSpec, ip string) (*corev1.Pod, error) {
	p, err := c.CreatePod(ctx, s)
	if err != nil {
		return nil, err
	}
	return c.MakeReady(ctx, p, ip)
}

// DeletePod deletes a pod and, if a kubelet would have to confirm it
// (nodeName set), confirms with grace 0. It returns once the pod is gone.
func (c *Cluster) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	pods := c.client.CoreV1().Pods(pod.Namespace)
	pre := metav1.DeleteOptions{}
	if pod.UID != "" {
		pre.Preconditions = &metav1.Preconditions{UID: &pod.UID}
	}
	if err := pods.Delete(ctx, pod.Name, pre); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != pod.UID && pod.UID != "") {
			return nil
		}
		if err != nil {
			return err
		}
		zero := int64(0)
		_ = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: pre.Preconditions})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CreateNamespace creates a namespace with labels, deleted in t.Cleanup
// only implicitly (the whole control plane goes away with the test).
func (c *Cluster) CreateNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	_, err := c.client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// PodReaderRole grants get/list/watch on pods in namespace to a service
// account: exactly what tether-sidecar's discovery needs.
func (c *Cluster) PodReaderRole(t testing.TB, namespace, serviceAccount string) {
	t.Helper()
	ctx := context.Background()
	rbac := c.client.RbacV1()
	name := "tether-pod-reader-" + serviceAccount
	if _, err := rbac.Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role: %v", err)
	}
	if _, err := rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding: %v", err)
	}
}
