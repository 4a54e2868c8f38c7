package gossip

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func pod(name, ip string, phase corev1.PodPhase, app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Labels: map[string]string{"app": app}},
		Status:     corev1.PodStatus{PodIP: ip, Phase: phase},
	}
}

func withKube(client kubernetes.Interface, bind string) nodeOpt {
	return func(c *config.GossipStore, o *Options) {
		c.Bind, c.Discovery, c.PeerSelector = bind, config.PeersKubernetes, "app=router"
		o.KubeClient, o.Namespace = client, "llm"
	}
}

// Replicas find each other through the pods of their own labels, at PodIP
// and the shared gossip port.
func TestKubernetesDiscovery(t *testing.T) {
	tn := newTestNet()
	client := fake.NewClientset()
	a := startNode(t, tn, "router-a", nil, withKube(client, "127.0.0.2:0"))
	port := portOf(a.selfAddr)
	b := startNode(t, tn, "router-b", nil, withKube(client, fmt.Sprintf("127.0.0.3:%d", port)))

	gone := pod("router-old", "127.0.0.9", corev1.PodRunning, "router")
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	for _, p := range []*corev1.Pod{
		pod("router-a", "127.0.0.2", corev1.PodRunning, "router"),
		pod("router-b", "127.0.0.3", corev1.PodPending, "router"), // sidecar up before the app
		pod("router-c", "", corev1.PodPending, "router"),          // no IP yet
		pod("router-done", "127.0.0.8", corev1.PodSucceeded, "router"),
		pod("model-0", "127.0.0.7", corev1.PodRunning, "model"),
		gone,
	} {
		if _, err := client.CoreV1().Pods("llm").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitMembers(t, []*Store{a, b}, 2, 10*time.Second)

	want := []string{fmt.Sprintf("127.0.0.2:%d", port), fmt.Sprintf("127.0.0.3:%d", port)}
	testkit.Eventually(t, 5*time.Second, "the peer addresses from the API", func() error {
		got := a.src.addrs(context.Background())
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("peer addresses %v, want %v", got, want)
		}
		return nil
	})
}

func TestKubernetesDiscoveryNeedsClientAndNamespace(t *testing.T) {
	for name, o := range map[string]Options{
		"no client":    {Namespace: "llm"},
		"no namespace": {KubeClient: fake.NewClientset()},
	} {
		cfg := &config.GossipStore{Bind: "127.0.0.1:0", Discovery: config.PeersKubernetes, PeerSelector: "app=router", MaxEntries: 10, Insecure: true}
		if s, err := New(context.Background(), cfg, o); err == nil {
			_ = s.Close()
			t.Errorf("%s: started", name)
		}
	}
}
