package inject_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/inject"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// testOptions are the injector defaults every golden case starts from.
func testOptions() inject.Options {
	return inject.Options{
		Image:           "ghcr.io/tetherproxy/tether-sidecar:test",
		ImagePullPolicy: corev1.PullIfNotPresent,
		Version:         "test",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("50m"),
				corev1.ResourceMemory: resource.MustParse("64Mi"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		ExcludedNamespaces: []string{"kube-system", "tether-system"},
		// The chart's default: gossip pods mount this Secret's key.
		GossipKeySecret: "tether-gossip-key",
		PreStopSleep:    15 * time.Second,
	}
}

type goldenCase struct {
	name  string
	input string            // testdata/in/<input>.yaml
	set   map[string]string // annotations to set on the input
	del   []string          // annotations to remove from the input
	// labels to set on the input pod.
	labels map[string]string
	// optInWebhook: the pod came through the opt-in webhook entry (its
	// namespace is not labelled).
	optInWebhook bool
	namespace    string
	opts         func(*inject.Options)
	// before transforms the decoded input pod (beyond annotations).
	before func(t testing.TB, p *corev1.Pod)
}

var routerAnnotations = []string{
	inject.AnnotationSources, inject.AnnotationTTL, inject.AnnotationBackendSelector, inject.AnnotationBackendPort,
}

func goldenCases() []goldenCase {
	return []goldenCase{
		// Injected.
		{name: "plain", input: "router"},
		{name: "plain-container", input: "router", opts: func(o *inject.Options) { o.PlainContainer = true }},
		{name: "plain-container-long-grace", input: "router", opts: func(o *inject.Options) { o.PlainContainer = true },
			before: func(_ testing.TB, p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](600) }},
		{name: "plain-container-no-prestop", input: "router", opts: func(o *inject.Options) { o.PlainContainer, o.PreStopSleep = true, 0 }},
		{name: "opt-in-outside-labelled-namespace", input: "router", optInWebhook: true,
			labels: map[string]string{inject.LabelInject: "true"}},
		{name: "pd", input: "router", del: []string{inject.AnnotationBackendSelector}, set: map[string]string{
			inject.AnnotationPrefillSelector: "app=ds,role=prefill",
			inject.AnnotationDecodeSelector:  "app=ds,role=decode",
			inject.AnnotationPDGroupLabel:    "pd-group",
			inject.AnnotationPool:            "deepseek-r1",
			inject.AnnotationAffinity:        "soft",
		}},
		{name: "affinity-cost", input: "router", set: map[string]string{
			inject.AnnotationAffinity: "soft", inject.AnnotationAffinityPolicy: "cost",
		}},
		{name: "configmap-config", input: "router", del: routerAnnotations, set: map[string]string{
			inject.AnnotationConfig:              "router-tether",
			inject.AnnotationStore:               "redis",
			inject.AnnotationRedisPasswordSecret: "redis-auth",
		}},
		{name: "gossip-store", input: "router", set: map[string]string{
			inject.AnnotationStore:           "gossip",
			inject.AnnotationGossipKeySecret: "tether-gossip",
			inject.AnnotationListenPort:      "9000",
		}},
		{name: "gossip-statefulset", input: "statefulset"},
		{name: "ports-moved", input: "router", set: map[string]string{
			inject.AnnotationStore:      "gossip",
			inject.AnnotationListenPort: "9000",
			inject.AnnotationAdminPort:  "9001",
			inject.AnnotationGossipPort: "7946",
		}},
		{name: "istio-native-sidecar", input: "istio"},
		{name: "linkerd-native-sidecar", input: "router", before: withLinkerd},
		{name: "istio-ports-excluded", input: "istio", set: map[string]string{
			"traffic.sidecar.istio.io/excludeInboundPorts":  "17020,17946",
			"traffic.sidecar.istio.io/excludeOutboundPorts": "17946",
		}},
		{name: "redis-store", input: "router", set: map[string]string{
			inject.AnnotationStore:               "redis",
			inject.AnnotationRedisAddress:        "redis.llm.svc:6379",
			inject.AnnotationRedisPasswordSecret: "redis-auth",
			inject.AnnotationRedisUsername:       "tether",
			inject.AnnotationRedisTLS:            "true",
		}},
		{name: "redis-store-key-and-degraded-start", input: "router", set: map[string]string{
			inject.AnnotationStore:                 "redis",
			inject.AnnotationRedisAddress:          "redis.llm.svc:6379",
			inject.AnnotationStoreKeySecret:        "router-store-key",
			inject.AnnotationRedisRequireAtStartup: "false",
			inject.AnnotationDebugPort:             "17031",
		}},
		{name: "redis-private-ca", input: "router", set: map[string]string{
			inject.AnnotationStore:         "redis",
			inject.AnnotationRedisAddress:  "redis.llm.svc:6379",
			inject.AnnotationRedisCASecret: "redis-ca",
		}},
		{name: "gossip-ready-without-peers", input: "router", set: map[string]string{
			inject.AnnotationStore:                  "gossip",
			inject.AnnotationGossipKeySecret:        "router-gossip",
			inject.AnnotationGossipRequireAtStartup: "false",
		}},
		{name: "redis-chart-defaults", input: "router", opts: func(o *inject.Options) {
			o.Store, o.RedisAddress, o.RedisPasswordSecret = "redis", "redis.tether-system.svc:6379", "tether-redis"
			o.RedisUsername, o.RedisTLS = "tether", true
			o.GossipKeySecret = "not-mounted-for-redis"
		}},
		{name: "redis-tls-off-by-annotation", input: "router", set: map[string]string{inject.AnnotationRedisTLS: "false"},
			opts: func(o *inject.Options) {
				o.Store, o.RedisAddress, o.RedisTLS = "redis", "redis.tether-system.svc:6379", true
				o.RedisCASecret = "chart-redis-ca" // not mounted: this pod has TLS off
			}},
		{name: "redis-chart-ca", input: "router", opts: func(o *inject.Options) {
			o.Store, o.RedisAddress, o.RedisTLS, o.RedisCASecret = "redis", "redis.tether-system.svc:6379", true, "chart-redis-ca"
		}},
		{name: "jwt-claim", input: "router", set: map[string]string{
			inject.AnnotationSources:       "JWTClaim:sub,Header:X-Session-ID",
			inject.AnnotationJWTSecret:     "router-jwt",
			inject.AnnotationJWTAlgorithms: "RS256,ES256",
			inject.AnnotationJWTIssuer:     "https://auth.example.com/",
			inject.AnnotationJWTAudience:   "chat",
			inject.AnnotationJWTRequireExp: "true",
		}},
		{name: "reinjected-after-upgrade", input: "router", before: func(t testing.TB, p *corev1.Pod) {
			o := testOptions()
			o.Version = "old"
			o.Store = "gossip" // the old injection had other volumes and ports
			o.GossipKeySecret = "old-key"
			inj, err := inject.New(o)
			if err != nil {
				t.Fatal(err)
			}
			res, err := inj.Inject(p, inject.Request{Namespace: "llm", NamespaceSelected: true})
			if err != nil || res.Pod == nil {
				t.Fatalf("old injection: %v %+v", err, res)
			}
			*p = *res.Pod
		}},
		{name: "per-pod-knobs", input: "router", set: map[string]string{
			inject.AnnotationLogLevel:         "debug",
			inject.AnnotationProxyCPU:         "200m/1",
			inject.AnnotationProxyMemory:      "512Mi/1Gi",
			inject.AnnotationPrometheusScrape: "true",
		}},
		{name: "proxy-memory-request-only", input: "router", set: map[string]string{inject.AnnotationProxyMemory: "128Mi"}},
		{name: "no-memory-limit", input: "router", opts: func(o *inject.Options) { o.Resources.Limits = nil }},
		// No sources: a plain load-balanced pool, as Kthena's without sessionSticky.
		{name: "non-sticky", input: "router", del: []string{inject.AnnotationSources, inject.AnnotationTTL}},
		// A Kthena ModelServer defines the pool.
		{name: "model-server", input: "router", del: routerAnnotations, set: map[string]string{
			inject.AnnotationModelServer: "deepseek-r1",
		}},
		{name: "model-server-session-token", input: "router", del: routerAnnotations, set: map[string]string{
			inject.AnnotationModelServer: "deepseek-r1", inject.AnnotationSessionTokenSecret: "router-token",
		}},
		{name: "session-token", input: "router", set: map[string]string{
			inject.AnnotationSources:            "Token:x-session-token,Header:X-Session-ID",
			inject.AnnotationSessionTokenSecret: "router-token",
		}},
		{name: "configmap-config-knobs", input: "router", del: routerAnnotations, set: map[string]string{
			inject.AnnotationConfig:             "router-tether",
			inject.AnnotationLogLevel:           "warn",
			inject.AnnotationSessionTokenSecret: "router-token",
			inject.AnnotationProxyMemory:        "1Gi/2Gi",
		}},
		{name: "prometheus-scrape-chart-default", input: "router", opts: func(o *inject.Options) { o.PrometheusScrape = true }},
		{name: "prometheus-scrape-chart-default-pod-has-own", input: "router", set: map[string]string{
			"prometheus.io/scrape": "true", "prometheus.io/port": "8080",
		}, opts: func(o *inject.Options) { o.PrometheusScrape = true }},
		{name: "prometheus-scrape-off-by-annotation", input: "router", set: map[string]string{inject.AnnotationPrometheusScrape: "false"},
			opts: func(o *inject.Options) { o.PrometheusScrape = true }},
		{name: "reinjected-after-upgrade-scrape-off", input: "router", before: func(t testing.TB, p *corev1.Pod) {
			o := testOptions()
			o.Version = "old"
			o.PrometheusScrape = true // the old chart had scraping on; the new one has not
			inj, err := inject.New(o)
			if err != nil {
				t.Fatal(err)
			}
			res, err := inj.Inject(p, inject.Request{Namespace: "llm", NamespaceSelected: true})
			if err != nil || res.Pod == nil || res.Pod.Annotations[inject.PrometheusScrape] != "true" {
				t.Fatalf("old injection: %v %+v", err, res)
			}
			*p = *res.Pod
		}},

		// Skipped.
		{name: "opted-out", input: "router", set: map[string]string{inject.AnnotationInject: "false"}},
		{name: "opted-out-label", input: "router", labels: map[string]string{inject.LabelInject: "false"}},
		{name: "opted-out-despite-invalid-annotations", input: "router", set: map[string]string{
			inject.AnnotationInject: "false", inject.AnnotationTTL: "soon"}},
		{name: "not-opted-in-outside-labelled-namespace", input: "router", optInWebhook: true},
		{name: "no-annotations", input: "model-server"},
		{name: "already-injected-by-hand", input: "manually-added"},
		{name: "host-network", input: "router", before: func(_ testing.TB, p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{name: "excluded-namespace", input: "router", namespace: "kube-system"},

		// Denied: every annotation's rules.
		{name: "invalid-sources-type", input: "router", set: map[string]string{inject.AnnotationSources: "Heder:X-Session-ID"}},
		{name: "invalid-sources-empty", input: "router", set: map[string]string{inject.AnnotationSources: ""}},
		{name: "invalid-sources-too-many", input: "router", set: map[string]string{
			inject.AnnotationSources: strings.TrimSuffix(strings.Repeat("Header:X-S,", 17), ",")}},
		{name: "invalid-sources-entry", input: "router", set: map[string]string{inject.AnnotationSources: "Header:X-Session-ID,session_id"}},
		{name: "invalid-sources-header-name", input: "router", set: map[string]string{inject.AnnotationSources: "Header:X Session"}},
		{name: "invalid-ttl-without-sources", input: "router", del: []string{inject.AnnotationSources}},
		{name: "invalid-sources-jwt-without-secret", input: "router", set: map[string]string{inject.AnnotationSources: "JWTClaim:sub"}},
		{name: "invalid-ttl-under-1s", input: "router", set: map[string]string{inject.AnnotationTTL: "500ms"}},
		{name: "invalid-ttl-zero", input: "router", set: map[string]string{inject.AnnotationTTL: "0"}},
		{name: "invalid-ttl-fraction", input: "router", set: map[string]string{inject.AnnotationTTL: "1500ms"}},
		{name: "invalid-ttl-word", input: "router", set: map[string]string{inject.AnnotationTTL: "five minutes"}},
		{name: "invalid-backend-selector", input: "router", set: map[string]string{inject.AnnotationBackendSelector: "app in (vllm"}},
		{name: "invalid-backend-selector-missing", input: "router", del: []string{inject.AnnotationBackendSelector}},
		{name: "invalid-backend-port", input: "router", set: map[string]string{inject.AnnotationBackendPort: "80000"}},
		{name: "invalid-backend-port-missing", input: "router", del: []string{inject.AnnotationBackendPort}},
		{name: "invalid-pd-half", input: "router", del: []string{inject.AnnotationBackendSelector},
			set: map[string]string{inject.AnnotationPrefillSelector: "role=prefill"}},
		{name: "invalid-pd-and-backend-selector", input: "router", set: map[string]string{
			inject.AnnotationPrefillSelector: "role=prefill", inject.AnnotationDecodeSelector: "role=decode"}},
		{name: "invalid-pd-group-label", input: "router", set: map[string]string{inject.AnnotationPDGroupLabel: "pd group"}},
		{name: "invalid-pd-group-label-without-pd", input: "router", set: map[string]string{inject.AnnotationPDGroupLabel: "pd-group"}},
		{name: "invalid-affinity", input: "router", set: map[string]string{inject.AnnotationAffinity: "sticky"}},
		{name: "invalid-affinity-policy", input: "router", set: map[string]string{inject.AnnotationAffinity: "soft", inject.AnnotationAffinityPolicy: "fast"}},
		{name: "invalid-affinity-policy-hard", input: "router", set: map[string]string{inject.AnnotationAffinityPolicy: "cost"}},
		{name: "invalid-listen-port", input: "router", set: map[string]string{inject.AnnotationListenPort: "17020"}},
		{name: "invalid-listen-port-word", input: "router", set: map[string]string{inject.AnnotationListenPort: "http"}},
		{name: "invalid-listen-port-taken", input: "router", set: map[string]string{inject.AnnotationListenPort: "8080"}},
		{name: "invalid-admin-port", input: "router", set: map[string]string{inject.AnnotationAdminPort: "0"}},
		{name: "invalid-admin-port-taken", input: "router", set: map[string]string{inject.AnnotationAdminPort: "8080"}},
		{name: "invalid-admin-port-default-taken", input: "router", before: func(_ testing.TB, p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: 17020})
		}},
		{name: "invalid-gossip-port-is-listen-port", input: "router", set: map[string]string{
			inject.AnnotationStore: "gossip", inject.AnnotationGossipPort: "17001"}},
		{name: "invalid-gossip-port-memory-store", input: "router", set: map[string]string{inject.AnnotationGossipPort: "7946"}},
		{name: "invalid-gossip-port-taken-by-init-container", input: "statefulset", set: map[string]string{inject.AnnotationGossipPort: "9000"},
			before: func(_ testing.TB, p *corev1.Pod) {
				p.Spec.InitContainers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9000, Protocol: corev1.ProtocolUDP}}
			}},
		{name: "invalid-admin-port-istio", input: "istio", set: map[string]string{inject.AnnotationAdminPort: "15020"}},
		{name: "invalid-listen-port-linkerd", input: "router", set: map[string]string{inject.AnnotationListenPort: "4140"}, before: withLinkerd},
		{name: "invalid-gossip-without-key", input: "router", set: map[string]string{inject.AnnotationStore: "gossip"},
			opts: func(o *inject.Options) { o.GossipKeySecret = "" }},
		{name: "invalid-redis-tls", input: "router", set: map[string]string{
			inject.AnnotationStore: "redis", inject.AnnotationRedisAddress: "redis:6379", inject.AnnotationRedisTLS: "yes"}},
		{name: "invalid-redis-username", input: "router", set: map[string]string{
			inject.AnnotationStore: "redis", inject.AnnotationRedisAddress: "redis:6379", inject.AnnotationRedisUsername: "te ther"}},
		{name: "invalid-redis-tls-memory-store", input: "router", set: map[string]string{inject.AnnotationRedisTLS: "true"}},
		{name: "invalid-store", input: "router", set: map[string]string{inject.AnnotationStore: "etcd"}},
		{name: "invalid-gossip-without-labels", input: "router", set: map[string]string{inject.AnnotationStore: "gossip"},
			before: func(_ testing.TB, p *corev1.Pod) { p.Labels = map[string]string{"pod-template-hash": "5d8f7c9b4"} }},
		{name: "invalid-redis-address", input: "router", set: map[string]string{
			inject.AnnotationStore: "redis", inject.AnnotationRedisAddress: "redis.llm.svc"}},
		{name: "invalid-redis-without-address", input: "router", set: map[string]string{inject.AnnotationStore: "redis"}},
		{name: "invalid-redis-address-memory-store", input: "router", set: map[string]string{inject.AnnotationRedisAddress: "redis:6379"}},
		{name: "invalid-redis-password-secret", input: "router", set: map[string]string{
			inject.AnnotationStore: "redis", inject.AnnotationRedisAddress: "redis:6379", inject.AnnotationRedisPasswordSecret: "Redis_Auth"}},
		{name: "invalid-redis-ca-secret-tls-off", input: "router", set: map[string]string{
			inject.AnnotationStore: "redis", inject.AnnotationRedisAddress: "redis:6379",
			inject.AnnotationRedisCASecret: "redis-ca", inject.AnnotationRedisTLS: "false"}},
		{name: "invalid-redis-ca-secret-memory-store", input: "router", set: map[string]string{inject.AnnotationRedisCASecret: "redis-ca"}},
		{name: "invalid-gossip-key-secret-redis-store", input: "router", set: map[string]string{
			inject.AnnotationStore: "redis", inject.AnnotationRedisAddress: "redis:6379", inject.AnnotationGossipKeySecret: "key"}},
		{name: "invalid-jwt-secret", input: "router", set: map[string]string{inject.AnnotationJWTSecret: "jwt/keys"}},
		{name: "invalid-jwt-algorithms", input: "router", set: map[string]string{
			inject.AnnotationJWTSecret: "jwt", inject.AnnotationJWTAlgorithms: "RS256,none"}},
		{name: "invalid-jwt-issuer-without-secret", input: "router", set: map[string]string{inject.AnnotationJWTIssuer: "https://auth/"}},
		{name: "invalid-jwt-require-exp", input: "router", set: map[string]string{
			inject.AnnotationJWTSecret: "jwt", inject.AnnotationJWTRequireExp: "always"}},
		{name: "invalid-jwt-audience-empty", input: "router", set: map[string]string{
			inject.AnnotationJWTSecret: "jwt", inject.AnnotationJWTAudience: " "}},
		{name: "invalid-pool", input: "router", set: map[string]string{inject.AnnotationPool: "Chat Router"}},
		{name: "invalid-config-name", input: "router", del: routerAnnotations, set: map[string]string{inject.AnnotationConfig: "router_config"}},
		{name: "invalid-config-with-pool-annotations", input: "router", set: map[string]string{inject.AnnotationConfig: "router-tether"}},
		{name: "invalid-inject", input: "router", set: map[string]string{inject.AnnotationInject: "yes"}},
		{name: "invalid-unknown-annotation", input: "router", set: map[string]string{"tether.dev/source": "Header:X"}},
		{name: "invalid-control-characters", input: "router", set: map[string]string{inject.AnnotationSources: "Header:X-A\x00"}},
		{name: "invalid-volume-name-taken", input: "router", set: map[string]string{inject.AnnotationConfig: "x"},
			del: routerAnnotations, before: func(_ testing.TB, p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "tether-config"})
			}},
		{name: "invalid-log-level", input: "router", set: map[string]string{inject.AnnotationLogLevel: "verbose"}},
		{name: "invalid-proxy-cpu", input: "router", set: map[string]string{inject.AnnotationProxyCPU: "lots"}},
		{name: "invalid-proxy-cpu-three-parts", input: "router", set: map[string]string{inject.AnnotationProxyCPU: "1/2/3"}},
		{name: "invalid-proxy-cpu-request-above-limit", input: "router", set: map[string]string{inject.AnnotationProxyCPU: "2/500m"}},
		{name: "invalid-proxy-memory-zero", input: "router", set: map[string]string{inject.AnnotationProxyMemory: "0"}},
		{name: "invalid-proxy-memory-above-default-limit", input: "router", set: map[string]string{inject.AnnotationProxyMemory: "512Mi"}},
		{name: "invalid-proxy-memory-limit-too-small", input: "router", set: map[string]string{inject.AnnotationProxyMemory: "32Mi/64Mi"}},
		{name: "invalid-prometheus-scrape", input: "router", set: map[string]string{inject.AnnotationPrometheusScrape: "yes"}},
		{name: "invalid-prometheus-scrape-pod-has-own", input: "router", set: map[string]string{
			inject.AnnotationPrometheusScrape: "true", "prometheus.io/port": "8080"}},
		{name: "invalid-token-source-without-secret", input: "router", set: map[string]string{inject.AnnotationSources: "Token:x-session-token"}},
		{name: "invalid-session-token-secret-without-token-source", input: "router", set: map[string]string{
			inject.AnnotationSessionTokenSecret: "router-token"}},
		{name: "invalid-session-token-secret-name", input: "router", set: map[string]string{
			inject.AnnotationSources: "Token:x-session-token", inject.AnnotationSessionTokenSecret: "Router_Token"}},
		{name: "invalid-model-server-with-pool-annotations", input: "router", set: map[string]string{
			inject.AnnotationModelServer: "deepseek-r1", inject.AnnotationPDGroupLabel: "pd-group"}},
		{name: "invalid-model-server-name", input: "router", del: routerAnnotations, set: map[string]string{
			inject.AnnotationModelServer: "llm/deepseek-r1"}},
		{name: "invalid-require-at-startup", input: "router", set: map[string]string{
			inject.AnnotationRedisRequireAtStartup: "no", inject.AnnotationGossipRequireAtStartup: "false"}},
		{name: "invalid-debug-port-taken", input: "router", set: map[string]string{inject.AnnotationDebugPort: "17020"}},
		{name: "invalid-several-at-once", input: "router", set: map[string]string{
			inject.AnnotationTTL: "0s", inject.AnnotationBackendPort: "0", inject.AnnotationStore: "disk"}},
	}
}

// withLinkerd adds what Linkerd's injector (whose webhook sorts before
// tether's) puts in a pod in native-sidecar mode: its init container and
// the linkerd-proxy native sidecar.
func withLinkerd(_ testing.TB, p *corev1.Pod) {
	p.Spec.InitContainers = append(p.Spec.InitContainers,
		corev1.Container{Name: "linkerd-init", Image: "cr.l5d.io/linkerd/proxy-init:v2.4.1"},
		corev1.Container{Name: "linkerd-proxy", Image: "cr.l5d.io/linkerd/proxy:stable-2.14.10",
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Ports: []corev1.ContainerPort{
				{Name: "linkerd-proxy", ContainerPort: 4143}, {Name: "linkerd-admin", ContainerPort: 4191},
			}})
}

// goldenDoc is what a golden file holds.
type goldenDoc struct {
	Result   string         `json:"result"`
	Message  string         `json:"message,omitempty"`
	Warnings []string       `json:"warnings,omitempty"`
	Pod      map[string]any `json:"pod,omitempty"`
}

func loadInput(t testing.TB, c goldenCase) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "in", c.input+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		t.Fatalf("%s: %v", c.input, err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for _, k := range c.del {
		delete(pod.Annotations, k)
	}
	for k, v := range c.set {
		pod.Annotations[k] = v
	}
	for k, v := range c.labels {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[k] = v
	}
	if c.before != nil {
		c.before(t, &pod)
	}
	return &pod
}

func newInjector(t *testing.T, c goldenCase) *inject.Injector {
	t.Helper()
	o := testOptions()
	if c.opts != nil {
		c.opts(&o)
	}
	inj, err := inject.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return inj
}

func request(c goldenCase) inject.Request {
	ns := c.namespace
	if ns == "" {
		ns = "llm"
	}
	return inject.Request{Namespace: ns, NamespaceSelected: !c.optInWebhook}
}

// TestGolden compares every case's patched pod (the JSONPatch applied to
// the input's JSON), skip reason or denial with testdata/golden.
func TestGolden(t *testing.T) {
	used := map[string]bool{}
	for _, c := range goldenCases() {
		file := c.name + ".golden.yaml"
		used[file] = true
		t.Run(c.name, func(t *testing.T) {
			pod := loadInput(t, c)
			inj := newInjector(t, c)
			patch, res, err := inj.Patch(pod, request(c))
			var doc goldenDoc
			switch {
			case err != nil:
				if _, ok := inject.AsDenial(err); !ok {
					t.Fatalf("internal error, not a denial: %v", err)
				}
				doc = goldenDoc{Result: "denied", Message: err.Error()}
			case res.Pod == nil:
				if patch != nil {
					t.Fatalf("skipped (%s) with a patch: %s", res.Skip, patch)
				}
				doc = goldenDoc{Result: string(res.Skip), Warnings: res.Warnings}
			default:
				doc = goldenDoc{Result: "injected", Warnings: res.Warnings, Pod: applyPatch(t, pod, patch, res.Pod)}
			}
			got := marshalGolden(t, doc)
			compareGolden(t, filepath.Join("testdata", "golden", file), got)
		})
	}
	entries, err := os.ReadDir(filepath.Join("testdata", "golden"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !used[e.Name()] {
			t.Errorf("unused golden file testdata/golden/%s: delete it or add its case", e.Name())
		}
	}
}

// applyPatch applies the JSONPatch to the input's JSON as the API server
// would, checks it equals the injector's own mutated pod, and returns it.
func applyPatch(t *testing.T, in *corev1.Pod, patch []byte, want *corev1.Pod) map[string]any {
	t.Helper()
	orig, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decode patch: %v\n%s", err, patch)
	}
	patched, err := p.Apply(orig)
	if err != nil {
		t.Fatalf("apply patch: %v\n%s", err, patch)
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !jsonpatch.Equal(patched, wantJSON) {
		t.Fatalf("patched pod differs from the mutated pod\npatched: %s\nwant:    %s", patched, wantJSON)
	}
	var m map[string]any
	if err := json.Unmarshal(patched, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// marshalGolden writes result first and the pod last, so a reader sees
// the verdict before the details.
func marshalGolden(t *testing.T, d goldenDoc) []byte {
	t.Helper()
	var out []byte
	for _, part := range []map[string]any{
		{"result": d.Result}, {"message": d.Message}, {"warnings": d.Warnings}, {"pod": d.Pod},
	} {
		for k, v := range part {
			if v == "" || v == nil || fmt.Sprint(v) == "[]" || fmt.Sprint(v) == "map[]" {
				continue
			}
			b, err := yaml.Marshal(map[string]any{k: v})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
		}
	}
	return out
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./injector/... -update to create it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs (go test ./injector/... -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestIdempotent injects every injected case a second time, as a
// reinvocation would: the pod must come back unchanged.
func TestIdempotent(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			inj := newInjector(t, c)
			res, err := inj.Inject(loadInput(t, c), request(c))
			if err != nil || res.Pod == nil {
				return // not injected: nothing to re-inject
			}
			patch, again, err := inj.Patch(res.Pod, request(c))
			if err != nil {
				t.Fatalf("second injection denied: %v", err)
			}
			if again.Skip != inject.SkipAlreadyInjected || patch != nil {
				t.Fatalf("second injection: skip %q, patch %s", again.Skip, patch)
			}
		})
	}
}
