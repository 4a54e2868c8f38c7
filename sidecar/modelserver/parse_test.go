package modelserver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/sidecar/config"
)

// object reads a ModelServer written as YAML, as the API server would
// hand it over (JSON numbers as int64 or float64).
func object(t testing.TB, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

const header = `apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {namespace: llm, name: ds}
`

// TestParseKthenaExamples: the shapes of Kthena's documented examples
// (a plain pool; a PD pool with pdGroup) and the sticky block.
func TestParseKthenaExamples(t *testing.T) {
	d, err := Parse(object(t, header+`spec:
  workloadSelector:
    matchLabels: {app: deepseek-r1-1-5b}
  workloadPort: {port: 8000}
  model: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
  inferenceEngine: vLLM
  trafficPolicy:
    timeout: 10s
    retry: {attempts: 3}
    sessionSticky:
      sessionAffinitySeconds: 600
      sources:
      - {type: Header, name: X-Session-ID}
      - {type: Cookie, name: sid}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Definition{
		Backends: config.Backends{Kubernetes: &config.KubeSelector{Namespace: "llm", Selector: "app=deepseek-r1-1-5b", Port: 8000}},
		Model:    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
		Timeout:  10 * time.Second,
		Sticky: &config.SessionSticky{SessionAffinitySeconds: config.Seconds(600), Sources: []config.Source{
			{Type: config.SourceHeader, Name: "X-Session-ID"}, {Type: config.SourceCookie, Name: "sid"}}},
	}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("plain pool:\n got %+v\nwant %+v", d, want)
	}

	d, err = Parse(object(t, header+`spec:
  workloadSelector:
    matchLabels: {app: deepseek-r1-1-5b}
    pdGroup:
      groupKey: modelserving.volcano.sh/group-name
      prefillLabels: {modelserving.volcano.sh/rolename: P-instance}
      decodeLabels: {modelserving.volcano.sh/rolename: D-instance}
  workloadPort: {port: 8000, protocol: http}
  model: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
  inferenceEngine: vLLM
`))
	if err != nil {
		t.Fatal(err)
	}
	want = &Definition{
		Backends: config.Backends{
			Prefill:    &config.KubeSelector{Namespace: "llm", Selector: "app=deepseek-r1-1-5b,modelserving.volcano.sh/rolename=P-instance", Port: 8000},
			Decode:     &config.KubeSelector{Namespace: "llm", Selector: "app=deepseek-r1-1-5b,modelserving.volcano.sh/rolename=D-instance", Port: 8000},
			GroupLabel: "modelserving.volcano.sh/group-name",
		},
		Model: "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
	}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("PD pool:\n got %+v\nwant %+v", d, want)
	}
	if d.Sticky != nil {
		t.Fatal("no sessionSticky must mean a non-sticky pool")
	}
}

// TestParseErrors: every problem names its field path.
func TestParseErrors(t *testing.T) {
	const ok = "  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: 8000}\n"
	cases := []struct{ name, spec, want string }{
		{"no spec", "", "spec: required"},
		{"no selector", "  workloadPort: {port: 8000}\n", "spec.workloadSelector.matchLabels: required"},
		{"empty matchLabels", "  workloadSelector: {matchLabels: {}}\n  workloadPort: {port: 8000}\n", "spec.workloadSelector.matchLabels: required"},
		{"bad label key", "  workloadSelector: {matchLabels: {'a b': x}}\n  workloadPort: {port: 8000}\n", `spec.workloadSelector.matchLabels.a b: "a b" is not a label key`},
		{"bad label value", "  workloadSelector: {matchLabels: {app: 'x y'}}\n  workloadPort: {port: 8000}\n", `spec.workloadSelector.matchLabels.app: "x y" is not a label value`},
		{"label not a string", "  workloadSelector: {matchLabels: {app: 3}}\n  workloadPort: {port: 8000}\n", "spec.workloadSelector.matchLabels.app: must be a string"},
		{"no port", "  workloadSelector: {matchLabels: {app: ds}}\n", "spec.workloadPort.port: required"},
		{"port 0", "  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: 0}\n", "spec.workloadPort.port: must be 1..65535, got 0"},
		{"port text", "  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: http}\n", "spec.workloadPort.port: must be a whole number"},
		{"port fraction", "  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: 80.5}\n", "spec.workloadPort.port: must be a whole number"},
		{"https", "  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: 8000, protocol: https}\n", `spec.workloadPort.protocol: "https" is not supported`},
		{"pdGroup halves", "  workloadSelector: {matchLabels: {app: ds}, pdGroup: {groupKey: g}}\n  workloadPort: {port: 8000}\n", "spec.workloadSelector.pdGroup.prefillLabels: required"},
		{"pdGroup key", "  workloadSelector: {pdGroup: {groupKey: 'a b', prefillLabels: {r: p}, decodeLabels: {r: d}}}\n  workloadPort: {port: 8000}\n", `spec.workloadSelector.pdGroup.groupKey: must be a label key, got "a b"`},
		{"model type", ok + "  model: 7\n", "spec.model: must be a string"},
		{"model length", ok + "  model: " + strings.Repeat("m", 257) + "\n", "spec.model: is 257 bytes, at most 256"},
		{"timeout", ok + "  trafficPolicy: {timeout: soon}\n", `spec.trafficPolicy.timeout: must be a duration such as 10s, got "soon"`},
		{"negative timeout", ok + "  trafficPolicy: {timeout: -1s}\n", `spec.trafficPolicy.timeout: must not be negative, got "-1s"`},
		{"trafficPolicy type", ok + "  trafficPolicy: []\n", "spec.trafficPolicy: must be an object"},
		{"sticky TTL type", ok + "  trafficPolicy: {sessionSticky: {sessionAffinitySeconds: x, sources: [{type: Header, name: X}]}}\n", "spec.trafficPolicy.sessionSticky.sessionAffinitySeconds: must be a whole number"},
		{"sticky sources type", ok + "  trafficPolicy: {sessionSticky: {sources: {type: Header}}}\n", "spec.trafficPolicy.sessionSticky.sources: must be a list"},
		{"sticky source shape", ok + "  trafficPolicy: {sessionSticky: {sources: [Header]}}\n", "spec.trafficPolicy.sessionSticky.sources[0]: must be an object with type and name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := header
			if tc.spec != "" {
				doc += "spec:\n" + tc.spec
			}
			_, err := Parse(object(t, doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestStickyRulesAtRunTime: a parsed block still has to pass the config's
// rules, with the field path of the object: an explicit
// sessionAffinitySeconds: 0 is refused (Kthena's admission refuses it
// too), no sources is refused.
func TestStickyRulesAtRunTime(t *testing.T) {
	for doc, want := range map[string]string{
		"{sessionAffinitySeconds: 0, sources: [{type: Header, name: X}]}": "spec.trafficPolicy.sessionSticky.sessionAffinitySeconds: must be at least 1 when set, got 0",
		"{sessionAffinitySeconds: 30}":                                    "spec.trafficPolicy.sessionSticky.sources: at least one source is required",
		"{sources: [{type: Bogus, name: X}]}":                             `spec.trafficPolicy.sessionSticky.sources[0].type: unknown source type "Bogus"`,
	} {
		d, err := Parse(object(t, header+"spec:\n  workloadSelector: {matchLabels: {app: ds}}\n  workloadPort: {port: 8000}\n  trafficPolicy: {sessionSticky: "+doc+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		err = d.Sticky.Validate("spec.trafficPolicy.sessionSticky", false, false)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want %q", doc, err, want)
		}
	}
}

// FuzzParse: no object, however shaped, panics Parse, and whatever it
// accepts selects something on a valid port.
func FuzzParse(f *testing.F) {
	f.Add(`{"metadata":{"namespace":"llm","name":"ds"},"spec":{"workloadSelector":{"matchLabels":{"app":"ds"}},"workloadPort":{"port":8000},"model":"m","trafficPolicy":{"timeout":"10s","sessionSticky":{"sessionAffinitySeconds":5,"sources":[{"type":"Header","name":"X"}]}}}}`)
	f.Add(`{"spec":{"workloadSelector":{"matchLabels":{"app":"ds"},"pdGroup":{"groupKey":"g","prefillLabels":{"r":"p"},"decodeLabels":{"r":"d"}}},"workloadPort":{"port":8000.0}}}`)
	f.Add(`{"spec":{"workloadSelector":null,"workloadPort":{"port":-1e300},"trafficPolicy":{"sessionSticky":{"sources":[null,{"type":1}]}}}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var m map[string]any
		if json.Unmarshal([]byte(doc), &m) != nil {
			return
		}
		u := &unstructured.Unstructured{Object: m}
		d, err := Parse(u)
		if err != nil {
			return
		}
		b := d.Backends
		sels := []*config.KubeSelector{b.Kubernetes, b.Prefill, b.Decode}
		for _, s := range sels {
			if s != nil && (s.Selector == "" || s.Port < 1 || s.Port > 65535) {
				t.Fatalf("accepted %s as %+v", doc, s)
			}
		}
		if b.Kubernetes == nil && (b.Prefill == nil || b.Decode == nil) {
			t.Fatalf("accepted %s without backends", doc)
		}
	})
}
