package inject_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/sidecar/config"
)

func TestPoolName(t *testing.T) {
	for _, c := range []struct {
		name      string
		meta      metav1.ObjectMeta
		annotated string
		want      string
	}{
		{"annotation wins", metav1.ObjectMeta{Labels: map[string]string{"app": "x"}}, "chat", "llm/chat"},
		{"app.kubernetes.io/name before app", metav1.ObjectMeta{Labels: map[string]string{"app": "a", "app.kubernetes.io/name": "b"}}, "", "llm/b"},
		{"app label", metav1.ObjectMeta{Labels: map[string]string{"app": "a"}}, "", "llm/a"},
		{"deployment generateName", metav1.ObjectMeta{GenerateName: "my-router-5d8f7c9b4-",
			Labels: map[string]string{"pod-template-hash": "5d8f7c9b4"}}, "", "llm/my-router"},
		{"daemonset generateName", metav1.ObjectMeta{GenerateName: "edge-"}, "", "llm/edge"},
		{"statefulset ordinal", metav1.ObjectMeta{Name: "web-12",
			Labels: map[string]string{"statefulset.kubernetes.io/pod-name": "web-12"}}, "", "llm/web"},
		{"bare pod", metav1.ObjectMeta{Name: "router-1"}, "", "llm/router-1"},
		{"nothing", metav1.ObjectMeta{}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := inject.PoolName(&corev1.Pod{ObjectMeta: c.meta}, "llm", c.annotated); got != c.want {
				t.Fatalf("PoolName = %q, want %q", got, c.want)
			}
		})
	}
}

func TestPeerSelector(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		"app": "router", "tier": "edge", "pod-template-hash": "abc", "controller-revision-hash": "r1",
		"statefulset.kubernetes.io/pod-name": "r-0", "apps.kubernetes.io/pod-index": "0",
	}}}
	if got, want := inject.PeerSelector(pod), "app=router,tier=edge"; got != want {
		t.Fatalf("PeerSelector = %q, want %q", got, want)
	}
	if got := inject.PeerSelector(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pod-template-hash": "x"}}}); got != "" {
		t.Fatalf("only per-pod labels: got %q, want empty", got)
	}
}

func TestExpandKubeletEnv(t *testing.T) {
	env := map[string]string{"POD_IP": "10.1.2.3"}
	for in, want := range map[string]string{
		"advertise: $(POD_IP)": "advertise: 10.1.2.3",
		"a$$b":                 "a$b",
		"$$(POD_IP)":           "$(POD_IP)",
		"$(UNKNOWN) $":         "$(UNKNOWN) $",
		"$(POD_IP":             "$(POD_IP",
		"$x":                   "$x",
	} {
		if got := inject.ExpandKubeletEnv(in, env); got != want {
			t.Errorf("ExpandKubeletEnv(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRenderedConfigParses checks the contract with the sidecar: the
// TETHER_CONFIG env value, once the kubelet expanded it, is a config the
// sidecar's own Parse accepts, and '$' in user values survives.
func TestRenderedConfigParses(t *testing.T) {
	o := testOptions()
	inj, err := inject.New(o)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "r-", Labels: map[string]string{"app": "r"}, Annotations: map[string]string{
			inject.AnnotationSources:         "Query:$session,Cookie:sid$(POD_IP)",
			inject.AnnotationBackendSelector: "app=vllm",
			inject.AnnotationBackendPort:     "8000",
			inject.AnnotationStore:           "gossip",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "r"}}},
	}
	res, err := inj.Inject(pod, inject.Request{Namespace: "llm", NamespaceSelected: true})
	if err != nil {
		t.Fatal(err)
	}
	var raw string
	for _, e := range res.Pod.Spec.InitContainers[0].Env {
		if e.Name == inject.EnvConfig {
			raw = e.Value
		}
	}
	cfg, err := config.Parse([]byte(inject.ExpandKubeletEnv(raw, map[string]string{"POD_IP": "10.0.0.7"})))
	if err != nil {
		t.Fatalf("sidecar rejects the rendered config: %v\n%s", err, raw)
	}
	if got := cfg.Store.Gossip.Advertise; got != "10.0.0.7" {
		t.Errorf("advertise = %q, want the pod IP", got)
	}
	src := cfg.Pools[0].SessionSticky.Sources
	if src[0].Name != "$session" || src[1].Name != "sid$(POD_IP)" {
		t.Errorf("user values changed by expansion: %+v", src)
	}
	if cfg.Pools[0].Name != "llm/r" || cfg.Admin != "0.0.0.0:17020" || cfg.Pools[0].Listen != "127.0.0.1:17001" ||
		cfg.Store.Gossip.Bind != "0.0.0.0:17946" || cfg.Store.Gossip.SecretKeyFile != "/var/run/secrets/tether/gossip/key" {
		t.Errorf("unexpected config: %+v", cfg)
	}
}

// TestMemoryDerivation: the sidecar's GOMEMLIMIT and the stores'
// maxEntries follow its memory limit (the chart's, or the pod's own).
func TestMemoryDerivation(t *testing.T) {
	inj, err := inject.New(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		memory, goMemLimit string
		maxEntries         int
	}{
		{"", "230MiB", config.MaxEntriesFor(230 << 20)}, // the chart's 256Mi
		{"128Mi/512Mi", "460MiB", config.MaxEntriesFor(460 << 20)},
		{"2Gi/4Gi", "3686MiB", config.DefaultMaxEntries}, // more than the default needs
	} {
		ann := map[string]string{
			inject.AnnotationSources: "Header:X-Session-ID", inject.AnnotationBackendSelector: "app=vllm",
			inject.AnnotationBackendPort: "8000", inject.AnnotationStore: "gossip",
		}
		if c.memory != "" {
			ann[inject.AnnotationProxyMemory] = c.memory
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "r-", Labels: map[string]string{"app": "r"}, Annotations: ann},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "r"}}},
		}
		res, err := inj.Inject(pod, inject.Request{Namespace: "llm", NamespaceSelected: true})
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, e := range res.Pod.Spec.InitContainers[0].Env {
			env[e.Name] = e.Value
		}
		if env[inject.EnvGoMemLimit] != c.goMemLimit {
			t.Errorf("%q: GOMEMLIMIT %q, want %q", c.memory, env[inject.EnvGoMemLimit], c.goMemLimit)
		}
		cfg, err := config.Parse([]byte(inject.ExpandKubeletEnv(env[inject.EnvConfig], map[string]string{"POD_IP": "10.0.0.7"})))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Store.Memory.MaxEntries != c.maxEntries || cfg.Store.Gossip.MaxEntries != c.maxEntries {
			t.Errorf("%q: maxEntries memory %d, gossip %d, want %d", c.memory, cfg.Store.Memory.MaxEntries, cfg.Store.Gossip.MaxEntries, c.maxEntries)
		}
	}
}

func TestNewOptions(t *testing.T) {
	for _, o := range []inject.Options{
		{},
		{Image: "x", Store: "disk"},
		{Image: "x", RedisAddress: "nohost"},
		{Image: "x", GossipKeySecret: "Bad_Name"},
		{Image: "x", RedisUsername: "a b"},
		{Image: "x", PreStopSleep: -time.Second},
		{Image: "x", PreStopSleep: 1500 * time.Millisecond},
		{Image: "x", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}},
	} {
		if _, err := inject.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// FuzzParseAnnotations feeds arbitrary values to every annotation: no
// input may panic, and every problem names a tether.dev/ annotation.
func FuzzParseAnnotations(f *testing.F) {
	f.Add("sources", "Header:X-Session-ID,Query:session_id")
	f.Add("ttl", "5m")
	f.Add("ttl", "300")
	f.Add("backend-selector", "app in (a,b),!canary")
	f.Add("backend-port", "http")
	f.Add("redis-address", "redis:6379,[::1]:6380")
	f.Add("jwt-algorithms", "RS256,HS512")
	f.Add("sources", "JWTClaim:https://x/claims:sid")
	f.Add("listen-port", "17001")
	f.Add("admin-port", "9001")
	f.Add("gossip-port", "7946")
	f.Add("redis-username", "tether")
	f.Add("redis-tls", "true")
	f.Add("inject", "true")
	f.Add("source", "x")
	f.Add("log-level", "debug")
	f.Add("proxy-cpu", "100m/500m")
	f.Add("proxy-memory", "128Mi/1Gi")
	f.Add("proxy-memory", "1e3/2e3")
	f.Add("prometheus-scrape", "true")
	f.Add("session-token-secret", "router-token")
	inj, err := inject.New(testOptions())
	if err != nil {
		f.Fatal(err)
	}
	base := map[string]string{
		inject.AnnotationSources:         "Header:X-Session-ID",
		inject.AnnotationBackendSelector: "app=vllm",
		inject.AnnotationBackendPort:     "8000",
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		ann := map[string]string{}
		for k, v := range base {
			ann[k] = v
		}
		ann[inject.Prefix+key] = value
		_, perr := inject.ParseAnnotations(ann)
		checkDenial(t, perr)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "r-", Labels: map[string]string{"app": "r"}, Annotations: ann},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "r"}}},
		}
		patch, res, err := inj.Patch(pod, inject.Request{Namespace: "llm", NamespaceSelected: true})
		checkDenial(t, err)
		if err == nil && res.Pod != nil {
			if len(patch) == 0 {
				t.Fatal("injected without a patch")
			}
			// The rendered config must be one the sidecar accepts.
			for _, e := range res.Pod.Spec.InitContainers[0].Env {
				if e.Name == inject.EnvConfig {
					if _, err := config.Parse([]byte(inject.ExpandKubeletEnv(e.Value, map[string]string{"POD_IP": "10.0.0.1"}))); err != nil {
						t.Fatalf("accepted %s=%q but the sidecar rejects its config: %v", key, value, err)
					}
				}
			}
			if _, err := yaml.Marshal(res.Pod); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func checkDenial(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	d, ok := inject.AsDenial(err)
	if !ok {
		t.Fatalf("error is not a denial: %v", err)
	}
	for _, e := range d.Errors {
		if !strings.HasPrefix(e.Annotation, inject.Prefix) || e.Rule == "" {
			t.Fatalf("problem does not name an annotation and a rule: %q", e.Error())
		}
	}
	var ae *inject.AnnotationError
	if !errors.As(d.Errors[0], &ae) {
		t.Fatal("not an AnnotationError")
	}
}

// BenchmarkPatch is the work of one admission: parse, render, validate,
// build the pod and diff it.
func BenchmarkPatch(b *testing.B) {
	inj, err := inject.New(testOptions())
	if err != nil {
		b.Fatal(err)
	}
	c := goldenCase{name: "bench", input: "router", set: map[string]string{inject.AnnotationStore: "gossip"}}
	pod := loadInput(b, c)
	req := inject.Request{Namespace: "llm", NamespaceSelected: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := inj.Patch(pod, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBodySourceAnnotations: `Body:<dotted path>` in tether.dev/sources
// becomes a Body source of the sidecar's config; a malformed path is
// denied naming the annotation.
func TestBodySourceAnnotations(t *testing.T) {
	a, err := inject.ParseAnnotations(map[string]string{
		inject.AnnotationSources: "Header:X-Session-ID,Body:prompt_cache_key,Body:metadata.session_id,Body:user",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Source{{Type: config.SourceHeader, Name: "X-Session-ID"}, {Type: config.SourceBody, Name: "prompt_cache_key"},
		{Type: config.SourceBody, Name: "metadata.session_id"}, {Type: config.SourceBody, Name: "user"}}
	if fmt.Sprint(a.Sources) != fmt.Sprint(want) {
		t.Fatalf("sources = %+v, want %+v", a.Sources, want)
	}
	_, err = inject.ParseAnnotations(map[string]string{inject.AnnotationSources: "Body:metadata..session_id"})
	if err == nil || !strings.Contains(err.Error(), inject.AnnotationSources+": \"metadata..session_id\" has an empty segment") {
		t.Fatalf("malformed body path: %v", err)
	}
}
