// Package manifests_test keeps manifests/examples valid: every object
// decodes strictly into its Kubernetes type, and every router pod template
// is accepted by the injector with a sidecar config the sidecar parses.
package manifests_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/sidecar/config"
)

func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	// The chart's defaults that matter here: gossip pods mount tether-gossip-key.
	inj, err := inject.New(inject.Options{Image: "ghcr.io/tetherproxy/tether-sidecar:test", GossipKeySecret: "tether-gossip-key"})
	if err != nil {
		t.Fatal(err)
	}
	routers := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj any
			switch tm.Kind {
			case "Namespace":
				obj = &corev1.Namespace{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			case "Secret":
				obj = &corev1.Secret{}
			case "Service":
				obj = &corev1.Service{}
			case "Deployment":
				obj = &appsv1.Deployment{}
			case "PeerAuthentication":
				if tm.APIVersion != "security.istio.io/v1" {
					t.Fatalf("%s: PeerAuthentication of %s, want security.istio.io/v1", f, tm.APIVersion)
				}
				continue // an Istio resource: no Go type here
			default:
				t.Fatalf("%s: unexpected kind %q", f, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s does not decode strictly: %v", f, tm.Kind, err)
			}
			d, ok := obj.(*appsv1.Deployment)
			if !ok {
				continue
			}
			if got, want := d.Spec.Selector.MatchLabels, d.Spec.Template.Labels; !subset(got, want) {
				t.Errorf("%s: %s selector %v does not match its template labels %v", f, d.Name, got, want)
			}
			// The pod as the ReplicaSet controller would create it.
			pod := &corev1.Pod{ObjectMeta: *d.Spec.Template.ObjectMeta.DeepCopy(), Spec: *d.Spec.Template.Spec.DeepCopy()}
			pod.GenerateName = d.Name + "-5d8f7c9b4-"
			pod.Namespace = d.Namespace
			if pod.Labels == nil {
				pod.Labels = map[string]string{}
			}
			pod.Labels["pod-template-hash"] = "5d8f7c9b4"
			istio := strings.Contains(doc, "traffic.sidecar.istio.io/")
			if istio {
				withIstio(pod)
			}
			res, err := inj.Inject(pod, inject.Request{Namespace: d.Namespace, NamespaceSelected: true})
			if err != nil {
				t.Fatalf("%s: %s is denied: %v", f, d.Name, err)
			}
			if res.Pod != nil && len(res.Warnings) > 0 {
				t.Errorf("%s: %s is injected with warnings (its settings are incomplete): %q", f, d.Name, res.Warnings)
			}
			if res.Pod == nil {
				if res.Skip != inject.SkipOptedOut {
					t.Errorf("%s: %s skipped (%s); label non-routers tether.dev/inject=false", f, d.Name, res.Skip)
				}
				continue
			}
			routers++
			sc := res.Pod.Spec.InitContainers[0]
			if istio {
				if names := containerNames(res.Pod.Spec.InitContainers); !slices.Equal(names, []string{"istio-validation", "istio-proxy", inject.ContainerName}) {
					t.Errorf("%s: %s: init containers %v, want tether's after istio-proxy", f, d.Name, names)
				}
				sc = res.Pod.Spec.InitContainers[2]
			}
			for _, e := range sc.Env {
				if e.Name == inject.EnvConfig {
					if _, err := config.Parse([]byte(inject.ExpandKubeletEnv(e.Value, map[string]string{"POD_IP": "10.0.0.1"}))); err != nil {
						t.Errorf("%s: %s: the sidecar rejects the rendered config: %v", f, d.Name, err)
					}
				}
			}
		}
	}
	if routers < 3 {
		t.Errorf("%d routers injected, want the plain, the Istio and the PD router", routers)
	}
}

// withIstio adds what Istio's injector (sidecar mode, native sidecars,
// istio-cni), which runs before tether's, puts in a pod.
func withIstio(pod *corev1.Pod) {
	always := corev1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = append([]corev1.Container{
		{Name: "istio-validation", Image: "docker.io/istio/proxyv2:1.28.0"},
		{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.28.0", RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}}},
	}, pod.Spec.InitContainers...)
}

func containerNames(cs []corev1.Container) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}
