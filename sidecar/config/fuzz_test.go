package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse: Parse never panics on any input, and whatever it accepts
// survives a JSON round trip: marshalled and parsed again, it is accepted
// and equal. That is what the injector relies on when it renders a config
// for the sidecar.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "example.yaml")); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		doc(""),
		doc("store: {backend: redis, redis: {addresses: [a:1, b:2], masterName: m, db: 3, timeout: 1s}}"),
		doc("store: {backend: gossip, gossip: {discovery: kubernetes, peerSelector: app=router, secretKeyFile: /k}}"),
		doc("jwt: {algorithms: [RS256, EdDSA], jwksFile: /j, issuer: i, audience: a}",
			pool("name: a", "models: [x]", "sessionSticky: {sources: [{type: JWTClaim, name: sub}, {type: Cookie, name: c}]}"),
			pool("name: b", "models: [y]", "affinity: {mode: soft, maxWaiting: 2}")),
		doc("", pool(`backends: {prefill: {selector: r=p, portName: http}, decode: {selector: "r in (d)", port: 8000}, groupLabel: g}`)),
		doc("proxy: {responseHeaderTimeout: 0s, failTimeout: 1h}"),
		doc("", pool("name: a", "sessionSticky: null", "backends: {modelServer: {namespace: llm, name: ds}}"), pool("name: b", "sessionSticky: null", "models: [m]")),
		doc("", pool("sessionSticky: {sessionAffinitySeconds: 0, sources: [{type: Token, name: t}]}", "sessionToken: {keyFile: k, cookie: {sameSite: Strict}}")),
		`{"pools":[{"name":"p","sessionSticky":{"sources":[{"type":"Query","name":"s"}]},"backends":{"static":["[::1]:80"]}}]}`,
		"pools: [{name: p, sessionSticky: {sources: [{type: Heder, name: x}]}}]",
		"{", "null", "[]", "pools: &a [*a]", "a: !!binary AAAA",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if c != nil {
				t.Fatal("Parse returned a config with an error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config does not validate again: %v", err)
		}
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		c2, err := Parse(j)
		if err != nil {
			t.Fatalf("round trip rejected: %v\n%s", err, j)
		}
		if !reflect.DeepEqual(normalize(c), normalize(c2)) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, c2)
		}
	})
}

// normalize maps empty slices to nil: omitempty drops them, which changes
// nothing a reader of the config can observe.
func normalize(c *Config) *Config {
	n := *c
	n.Pools = append([]Pool(nil), c.Pools...)
	for i := range n.Pools {
		if len(n.Pools[i].Models) == 0 {
			n.Pools[i].Models = nil
		}
	}
	if c.JWT != nil {
		j := *c.JWT
		if len(j.PublicKeyFiles) == 0 {
			j.PublicKeyFiles = nil
		}
		n.JWT = &j
	}
	return &n
}
