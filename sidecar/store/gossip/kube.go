package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// kubePeers finds the other router replicas through the Kubernetes API: the
// pods of the own namespace that match peerSelector, watched by a shared
// informer, joined at PodIP and our own gossip port (every replica of a
// Deployment listens on the same one).
//
// A pod counts once it has an IP and is Pending or Running and not being
// deleted. Readiness is deliberately not required: a replica may report
// ready only after it has joined the ring, so waiting for peers to be
// ready could keep a fresh Deployment from ever forming one.
type kubePeers struct {
	factory informers.SharedInformerFactory
	lister  listersv1.PodLister
	sel     labels.Selector
	port    string
	kick    chan struct{}
	cancel  context.CancelFunc
}

func newKubePeers(_ context.Context, client kubernetes.Interface, ns, selector string, port int, log *slog.Logger) (*kubePeers, error) {
	if client == nil {
		return nil, errors.New("gossip store: discovery kubernetes needs a Kubernetes client")
	}
	if ns == "" {
		return nil, errors.New("gossip store: discovery kubernetes needs the namespace (env POD_NAMESPACE)")
	}
	sel, err := labels.Parse(selector)
	if err != nil || selector == "" {
		return nil, fmt.Errorf("store.gossip.peerSelector %q: want a non-empty label selector", selector)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	pods := factory.Core().V1().Pods()
	p := &kubePeers{factory: factory, lister: pods.Lister(), sel: sel, port: strconv.Itoa(port), kick: make(chan struct{}, 1)}
	poke := func(any) {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, n any) { poke(n) },
	}); err != nil {
		return nil, fmt.Errorf("gossip store: pod informer: %w", err)
	}
	// The informer lives until stop (Close), not for New's context.
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	factory.Start(ctx.Done())
	log.Debug("gossip: watching peer pods", "namespace", ns, "selector", selector)
	return p, nil
}

func (p *kubePeers) addrs(context.Context) []string {
	// The server filters by the selector already; matching again costs
	// nothing and keeps a lenient server (or a test fake) honest.
	pods, err := p.lister.List(p.sel)
	if err != nil {
		return nil
	}
	var out []string
	for _, pod := range pods {
		if peerPod(pod) {
			out = append(out, net.JoinHostPort(pod.Status.PodIP, p.port))
		}
	}
	return out
}

func peerPod(pod *corev1.Pod) bool {
	if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
		return false
	}
	return pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodPending
}

func (p *kubePeers) changed() <-chan struct{} { return p.kick }

func (p *kubePeers) stop() {
	p.cancel()
	p.factory.Shutdown()
}
