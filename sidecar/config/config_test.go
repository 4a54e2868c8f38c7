package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pool renders one pool as a YAML flow mapping; name, sources and
// backends get valid values unless fields set them.
func pool(fields ...string) string {
	has := func(prefix string) bool {
		for _, f := range fields {
			if strings.HasPrefix(f, prefix) {
				return true
			}
		}
		return false
	}
	if !has("name:") {
		fields = append(fields, "name: p")
	}
	if !has("sessionSticky:") {
		fields = append(fields, "sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}")
	}
	if !has("backends:") {
		fields = append(fields, `backends: {static: ["127.0.0.1:8001"]}`)
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

// doc is a document with top-level lines and the given pools.
func doc(top string, pools ...string) string {
	if len(pools) == 0 {
		pools = []string{pool()}
	}
	return top + "\npools:\n- " + strings.Join(pools, "\n- ") + "\n"
}

func TestExampleParses(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pools[0]
	if p.Name != "default/deepseek-r1" || p.SessionSticky.TTL() != 300*time.Second || len(p.SessionSticky.Sources) != 4 ||
		p.SessionSticky.Sources[3] != (Source{Type: SourceJWTClaim, Name: "sub"}) || len(p.Backends.Static) != 2 ||
		c.JWT == nil || c.JWT.Algorithms[0] != "HS256" || c.Store.Memory.MaxEntries != 1_000_000 {
		t.Fatalf("example parsed as %+v", c)
	}
}

// TestREADMEExamples parses every complete configuration (a yaml block
// with pools) in the README, so the documented contract cannot drift.
func TestREADMEExamples(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatalf("README.md: %v (the README documents the configuration; this test checks its examples)", err)
	}
	blocks := regexp.MustCompile("(?s)```ya?ml\n(.*?)```").FindAllSubmatch(b, -1)
	n := 0
	for _, m := range blocks {
		if !regexp.MustCompile(`(?m)^pools:`).Match(m[1]) {
			continue // a fragment, not a whole document
		}
		n++
		if _, err := Parse(m[1]); err != nil {
			t.Errorf("README yaml block %d does not parse: %v\n%s", n, err, m[1])
		}
	}
	if n == 0 {
		t.Fatal("README.md has no complete configuration example (a ```yaml block with top-level pools:)")
	}
}

func TestJSONInput(t *testing.T) {
	y, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := Parse([]byte(`{
	  "listen": "127.0.0.1:17001", "admin": "127.0.0.1:17020",
	  "store": {"backend": "memory", "memory": {"maxEntries": 1000000}},
	  "jwt": {"hmacSecretFile": "/path/secret", "algorithms": ["HS256"], "issuer": "", "audience": ""},
	  "pools": [{
	    "name": "default/deepseek-r1", "listen": "127.0.0.1:17001", "models": [],
	    "sessionSticky": {"sessionAffinitySeconds": 300, "sources": [
	      {"type": "Header", "name": "X-Session-ID"}, {"type": "Query", "name": "session_id"},
	      {"type": "Cookie", "name": "session_sid"}, {"type": "JWTClaim", "name": "sub"}]},
	    "backends": {"static": ["127.0.0.1:8001", "127.0.0.1:8002"]}
	  }]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(y, j) {
		t.Fatalf("JSON and YAML differ:\n%+v\n%+v", y, j)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(doc("")))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Listen: DefaultListen,
		Admin:  DefaultAdmin,
		Store:  Store{Backend: StoreMemory, Memory: MemoryStore{MaxEntries: DefaultMaxEntries}},
		Proxy: Proxy{
			MaxRequestBodyBytes:   DefaultMaxRequestBodyBytes,
			MaxRequestHeaderBytes: DefaultMaxRequestHeaderBytes,
			DialTimeout:           Duration{DefaultDialTimeout},
			ShutdownTimeout:       Duration{DefaultShutdownTimeout},
			FirstByteTimeout:      Duration{DefaultFirstByteTimeout},
			OutlierDetection: OutlierDetection{
				ConsecutiveFailures: DefaultConsecutiveFailures,
				BaseEjectionTime:    Duration{DefaultBaseEjectionTime},
				MaxEjectionTime:     Duration{DefaultMaxEjectionTime},
				MaxEjectionPercent:  DefaultMaxEjectionPercent,
			},
			BodyReadTimeout:       Duration{DefaultBodyReadTimeout},
			StreamIdleTimeout:     Duration{DefaultStreamIdleTimeout},
			MaxConcurrentRequests: DefaultMaxConcurrentRequests,
		},
		Pools: []Pool{{
			Name:          "p",
			Listen:        DefaultListen,
			SessionSticky: &SessionSticky{SessionAffinitySeconds: Seconds(DefaultSessionAffinitySeconds), Sources: []Source{{Type: SourceHeader, Name: "X-Session-ID"}}},
			Backends:      Backends{Static: []string{"127.0.0.1:8001"}},
			Affinity:      Affinity{Mode: AffinityHard, MaxWaiting: DefaultMaxWaiting, LoadMargin: DefaultLoadMargin},
		}},
	}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", *c, want)
	}

	// A pool inherits the top-level listen; a store backend chosen without
	// its block gets the block's defaults; PD pools get the prefill header.
	c, err = Parse([]byte(doc("listen: 127.0.0.1:9000\nstore: {backend: gossip, gossip: {secretKeyFile: /k}}",
		pool(`backends: {prefill: {selector: role=prefill, port: 8000}, decode: {selector: role=decode, port: 8000}}`))))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].Listen != "127.0.0.1:9000" {
		t.Errorf("pool listen = %q", c.Pools[0].Listen)
	}
	if g := c.Store.Gossip; g == nil || g.Bind != DefaultGossipBind || g.Discovery != PeersStatic || g.MaxEntries != DefaultMaxEntries {
		t.Errorf("gossip defaults = %+v", g)
	}
	if h := c.Pools[0].Backends.PrefillHeader; h != DefaultPrefillHeader {
		t.Errorf("prefillHeader = %q", h)
	}
	c, err = Parse([]byte(doc("store: {backend: redis, redis: {address: 127.0.0.1:6379}}")))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Store.Redis; r.Timeout.Duration != DefaultRedisTimeout || r.KeyPrefix != DefaultRedisKeyPrefix {
		t.Errorf("redis defaults = %+v", r)
	}

	// Set values are kept, and SetDefaults is idempotent.
	c, err = Parse([]byte(doc("proxy: {failTimeout: 250ms}", pool("sessionSticky: {sessionAffinitySeconds: 1, sources: [{type: Query, name: s}]}", "affinity: {mode: soft}"))))
	if err != nil {
		t.Fatal(err)
	}
	if c.Proxy.FailTimeout.Duration != 250*time.Millisecond || c.Pools[0].SessionSticky.TTL() != time.Second || c.Pools[0].Affinity.Mode != AffinitySoft {
		t.Errorf("set values lost: %+v", c)
	}
	again := *c
	again.Pools = append([]Pool(nil), c.Pools...)
	again.SetDefaults()
	if !reflect.DeepEqual(&again, c) {
		t.Error("SetDefaults is not idempotent")
	}
}

func TestStrictDecoding(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"unknown top-level field", doc("lissen: 127.0.0.1:1"), `unknown field "lissen"`},
		{"unknown pool field", doc("", pool("sticky: true")), `unknown field "pools[0].sticky"`},
		{"unknown source field", doc("", pool("sessionSticky: {sources: [{type: Header, name: X, value: y}]}")), `unknown field "pools[0].sessionSticky.sources[0].value"`},
		{"unknown jwt field", doc("jwt: {algorithms: [HS256], hmacSecretFile: s, secret: x}"), `unknown field "jwt.secret"`},
		{"field name case", doc("Listen: 127.0.0.1:1"), `unknown field "Listen"`},
		{"nested field name case", doc("", pool("Name: q")), `unknown field "pools[0].Name"`},
		{"duplicate key", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n" + doc(""), `"listen" already set`},
		{"wrong type", doc("store: {memory: {maxEntries: many}}"), "maxEntries"},
		{"duration as number", doc("proxy: {failTimeout: 5}"), `duration must be a string such as "50ms" or "5m"`},
		{"bad duration", doc("proxy: {failTimeout: soon}"), `invalid duration "soon"`},
		{"not a mapping", "- a\n- b\n", "cannot unmarshal array"},
		{"empty", "", "config: document is empty"},
		{"blank", " \n\t\n", "config: document is empty"},
		{"too large", doc("# " + strings.Repeat("x", MaxConfigBytes)), "config: document is"},
		{"invalid UTF-8", doc("admin: \"\xff\""), "config: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.HasPrefix(err.Error(), "config: open ") {
		t.Fatalf("Load of a missing file: %v", err)
	}
}

func TestValidation(t *testing.T) {
	seventeen := strings.Repeat("{type: Query, name: q}, ", 16) + "{type: Query, name: q}"
	static2 := func(a, b string) string { return `backends: {static: ["` + a + `", "` + b + `"]}` }
	cases := []struct{ name, doc, want string }{
		{"listen", doc("listen: nohost"), `listen: must be host:port, got "nohost"`},
		{"listen port", doc("listen: 127.0.0.1:70000"), `listen: port must be 0..65535, got "70000"`},
		{"admin", doc("admin: 127.0.0.1"), `admin: must be host:port, got "127.0.0.1"`},
		{"debug on the pod network", doc("debug: 0.0.0.0:17021"), `debug: must be a loopback address (127.0.0.1, ::1 or localhost): /debug/* reveals and changes session bindings, got "0.0.0.0:17021"`},
		{"debug on a pod IP", doc("debug: 10.1.2.3:17021"), `debug: must be a loopback address`},
		{"debug without a host", doc("debug: :17021"), `debug: must be a loopback address`},
		{"debug is admin", doc("admin: 127.0.0.1:9\ndebug: 127.0.0.1:9"), `debug: must differ from admin (127.0.0.1:9)`},
		{"static host length", doc("", pool(`backends: {static: ["`+strings.Repeat("h", 254)+`:80"]}`)), `pools[0].backends.static[0]: host is 254 bytes, a DNS name is at most 253`},
		{"proxy bodyReadTimeout", doc("proxy: {bodyReadTimeout: -1s}"), `proxy.bodyReadTimeout: must be positive, got -1s`},
		{"proxy streamIdleTimeout", doc("proxy: {streamIdleTimeout: -5m}"), `proxy.streamIdleTimeout: must be positive, got -5m0s`},
		{"proxy maxConcurrentRequests", doc("proxy: {maxConcurrentRequests: -1}"), `proxy.maxConcurrentRequests: must be at least 1, got -1`},
		{"store backend", doc("store: {backend: etcd}"), `store.backend: unknown backend "etcd" (want memory, gossip or redis)`},
		{"memory maxEntries", doc("store: {memory: {maxEntries: -1}}"), `store.memory.maxEntries: must be at least 1, got -1`},
		{"redis address", doc("store: {backend: redis}"), `store.redis.address: required (or addresses for Cluster and Sentinel)`},
		{"redis both", doc("store: {backend: redis, redis: {address: a:1, addresses: [b:1]}}"), `store.redis.address: set address or addresses, not both`},
		{"redis address form", doc("store: {backend: redis, redis: {address: redis}}"), `store.redis.address: must be host:port, got "redis"`},
		{"redis addresses form", doc("store: {backend: redis, redis: {addresses: [a:1, b]}}"), `store.redis.addresses[1]: must be host:port, got "b"`},
		{"redis caFile without tls", doc("store: {backend: redis, redis: {address: a:1, caFile: /ca.crt}}"), `store.redis.caFile: needs tls: true (the CA verifies Redis's TLS certificate)`},
		{"redis db", doc("store: {backend: redis, redis: {address: a:1, db: -1}}"), `store.redis.db: must be 0 or more, got -1`},
		{"redis cluster db", doc("store: {backend: redis, redis: {addresses: [a:1, b:1], db: 2}}"), `store.redis.db: Redis Cluster has only db 0, got 2`},
		{"redis timeout", doc("store: {backend: redis, redis: {address: a:1, timeout: -1s}}"), `store.redis.timeout: must be positive, got -1s`},
		{"redis keyPrefix", doc("store: {backend: redis, redis: {address: a:1, keyPrefix: \"a{b}\"}}"), `store.redis.keyPrefix: must be non-empty without spaces or braces, got "a{b}"`},
		{"gossip bind", doc("store: {backend: gossip, gossip: {bind: x}}"), `store.gossip.bind: must be host:port, got "x"`},
		{"gossip advertise", doc("store: {backend: gossip, gossip: {advertise: not-an-ip}}"), `store.gossip.advertise: must be an IP address or IP:port, got "not-an-ip"`},
		{"gossip join", doc("store: {backend: gossip, gossip: {join: [a:1, b]}}"), `store.gossip.join[1]: must be host:port, got "b"`},
		{"gossip discovery", doc("store: {backend: gossip, gossip: {discovery: consul}}"), `store.gossip.discovery: unknown discovery "consul" (want static, kubernetes or dns)`},
		{"gossip kubernetes selector", doc("store: {backend: gossip, gossip: {discovery: kubernetes}}"), `store.gossip.peerSelector: required when discovery is kubernetes`},
		{"gossip selector syntax", doc("store: {backend: gossip, gossip: {discovery: kubernetes, peerSelector: \"a in (\"}}"), `store.gossip.peerSelector: invalid label selector`},
		{"gossip dns", doc("store: {backend: gossip, gossip: {discovery: dns}}"), `store.gossip.dnsName: required when discovery is dns`},
		{"gossip maxEntries", doc("store: {backend: gossip, gossip: {maxEntries: -3}}"), `store.gossip.maxEntries: must be at least 1, got -3`},
		{"gossip without a key", doc("store: {backend: gossip}"), `store.gossip.secretKeyFile: required: gossip is encrypted and authenticated with a shared key (a file holding 16, 24 or 32 bytes, raw or base64: openssl rand -base64 32 > gossip.key); set store.gossip.insecure: true to run a plaintext ring`},
		{"gossip insecure with a key", doc("store: {backend: gossip, gossip: {secretKeyFile: /k, insecure: true}}"), `store.gossip.insecure: must not be true with secretKeyFile`},
		{"jwt algorithms", doc("jwt: {hmacSecretFile: s}"), `jwt.algorithms: at least one algorithm is required`},
		{"jwt none", doc("jwt: {hmacSecretFile: s, algorithms: [HS256, none]}"), `jwt.algorithms[1]: unsupported algorithm "none"`},
		{"jwt algorithm case", doc("jwt: {hmacSecretFile: s, algorithms: [hs256]}"), `jwt.algorithms[0]: unsupported algorithm "hs256"`},
		{"jwt hmac secret", doc("jwt: {algorithms: [HS256]}"), `jwt.hmacSecretFile: required by the HMAC algorithms in jwt.algorithms`},
		{"jwt public keys", doc("jwt: {algorithms: [RS256]}"), `jwt.publicKeyFiles: publicKeyFiles or jwksFile is required by the public-key algorithms`},
		{"proxy body", doc("proxy: {maxRequestBodyBytes: -1}"), `proxy.maxRequestBodyBytes: must be at least 1, got -1`},
		{"proxy header", doc("proxy: {maxRequestHeaderBytes: 100}"), `proxy.maxRequestHeaderBytes: must be at least 1024, got 100`},
		{"proxy failTimeout", doc("proxy: {failTimeout: -1s}"), `proxy.failTimeout: must not be negative, got -1s`},
		{"proxy firstByteTimeout", doc("proxy: {firstByteTimeout: -1s}"), `proxy.firstByteTimeout: must be positive, got -1s`},
		{"outlier consecutiveFailures", doc("proxy: {outlierDetection: {consecutiveFailures: -1}}"), `proxy.outlierDetection.consecutiveFailures: must be at least 1, got -1`},
		{"outlier baseEjectionTime", doc("proxy: {outlierDetection: {baseEjectionTime: -1s}}"), `proxy.outlierDetection.baseEjectionTime: must be positive, got -1s`},
		{"outlier maxEjectionPercent", doc("proxy: {outlierDetection: {maxEjectionPercent: 101}}"), `proxy.outlierDetection.maxEjectionPercent: must be 1..100, got 101`},
		{"pool firstByteTimeout", doc("", pool("proxy: {firstByteTimeout: -2s}")), `pools[0].proxy.firstByteTimeout: must be positive, got -2s`},
		{"pool outlier percent", doc("", pool("proxy: {outlierDetection: {maxEjectionPercent: -5}}")), `pools[0].proxy.outlierDetection.maxEjectionPercent: must be 1..100, got -5`},
		{"pool outlier times", doc("", pool("proxy: {outlierDetection: {baseEjectionTime: 10m}}")), `pools[0].proxy.outlierDetection.maxEjectionTime: must be at least baseEjectionTime (10m0s), got 5m0s`},
		{"health check on kubernetes", doc("", pool("backends: {kubernetes: {selector: app=m, port: 80}, healthCheck: {}}")), `pools[0].backends.healthCheck: only static backends are health-checked`},
		{"health check path", doc("", pool(`backends: {static: ["a:1"], healthCheck: {path: health}}`)), `pools[0].backends.healthCheck.path: must start with /, got "health"`},
		{"health check timeout", doc("", pool(`backends: {static: ["a:1"], healthCheck: {interval: 1s, timeout: 2s}}`)), `pools[0].backends.healthCheck.timeout: must be positive and at most interval (1s), got 2s`},
		{"health check threshold", doc("", pool(`backends: {static: ["a:1"], healthCheck: {healthyThreshold: -1}}`)), `pools[0].backends.healthCheck.healthyThreshold: must be at least 1, got -1`},
		{"proxy dialTimeout", doc("proxy: {dialTimeout: -5ms}"), `proxy.dialTimeout: must be positive, got -5ms`},
		{"proxy responseHeaderTimeout", doc("proxy: {responseHeaderTimeout: -1s}"), `proxy.responseHeaderTimeout: must not be negative, got -1s`},
		{"no pools", "listen: 127.0.0.1:1\n", `pools: at least one pool is required`},
		{"empty pools", "pools: []\n", `pools: at least one pool is required`},
		{"pool name", doc("", pool(`name: ""`)), `pools[0].name: required`},
		{"duplicate pool", doc("", pool("models: [a]"), pool("models: [b]")), `pools[1].name: duplicate pool name "p" (also pools[0])`},
		{"pool listen", doc("", pool("listen: ':x'")), `pools[0].listen: port must be 0..65535, got "x"`},
		{"ttl", doc("", pool("sessionSticky: {sessionAffinitySeconds: -1, sources: [{type: Query, name: s}]}")), `pools[0].sessionSticky.sessionAffinitySeconds: must be at least 1 when set, got -1`},
		{"explicit ttl 0", doc("", pool("sessionSticky: {sessionAffinitySeconds: 0, sources: [{type: Query, name: s}]}")), `pools[0].sessionSticky.sessionAffinitySeconds: must be at least 1 when set, got 0`},
		{"explicit ttl 0 JSON", `{"pools":[{"name":"p","sessionSticky":{"sessionAffinitySeconds":0,"sources":[{"type":"Query","name":"s"}]},"backends":{"static":["a:1"]}}]}`, `pools[0].sessionSticky.sessionAffinitySeconds: must be at least 1 when set, got 0`},
		{"empty sessionSticky", doc("", pool("sessionSticky: {}")), `pools[0].sessionSticky.sources: at least one source is required`},
		{"token without sessionSticky", doc("", pool("sessionSticky: null", "sessionToken: {keyFile: k}")), `pools[0].sessionToken: needs sessionSticky`},
		{"cookie name", doc("", pool("sessionSticky: {sources: [{type: Query, name: s}]}", "sessionToken: {keyFile: k, cookie: {name: \"a b\"}}")), `pools[0].sessionToken.cookie.name: "a b" is not a valid cookie name`},
		{"cookie sameSite", doc("", pool("sessionSticky: {sources: [{type: Query, name: s}]}", "sessionToken: {keyFile: k, cookie: {sameSite: lax}}")), `pools[0].sessionToken.cookie.sameSite: unknown value "lax" (want Lax, Strict or None)`},
		{"cookie sameSite None", doc("", pool("sessionSticky: {sources: [{type: Query, name: s}]}", "sessionToken: {keyFile: k, cookie: {sameSite: None}}")), `pools[0].sessionToken.cookie.sameSite: None needs secure: true`},
		{"modelServer with sessionSticky", doc("", pool("backends: {modelServer: {name: ds}}")), `pools[0].sessionSticky: must not be set with backends.modelServer`},
		{"modelServer with models", doc("", pool("sessionSticky: null", "models: [m]", "backends: {modelServer: {name: ds}}")), `pools[0].models: must not be set with backends.modelServer`},
		{"modelServer name", doc("", pool("sessionSticky: null", "backends: {modelServer: {name: DS}}")), `pools[0].backends.modelServer.name: must be the name of a ModelServer, got "DS"`},
		{"modelServer namespace", doc("", pool("sessionSticky: null", "backends: {modelServer: {namespace: a.b, name: ds}}")), `pools[0].backends.modelServer.namespace: must be a namespace name, got "a.b"`},
		{"modelServer and static", doc("", pool("sessionSticky: null", `backends: {modelServer: {name: ds}, static: ["a:1"]}`)), `pools[0].backends: exactly one of static, kubernetes, prefill+decode or modelServer is required`},
		{"modelServer groupLabel", doc("", pool("sessionSticky: null", "backends: {modelServer: {name: ds}, groupLabel: g}")), `pools[0].backends.groupLabel: must not be set with modelServer`},
		{"no sources", doc("", pool("sessionSticky: {sources: []}")), `pools[0].sessionSticky.sources: at least one source is required`},
		{"sources absent", doc("", pool("sessionSticky: {sessionAffinitySeconds: 5}")), `pools[0].sessionSticky.sources: at least one source is required`},
		{"too many sources", doc("", pool("sessionSticky: {sources: ["+seventeen+"]}")), `pools[0].sessionSticky.sources: at most 16 sources are allowed, got 17`},
		{"body path", doc("", pool("sessionSticky: {sources: [{type: Body, name: metadata..session_id}]}")), `pools[0].sessionSticky.sources[0].name: "metadata..session_id" has an empty segment (write field.subfield, no leading, trailing or double dots)`},
		{"source type", doc("", pool("sessionSticky: {sources: [{type: Header, name: A}, {type: Heder, name: X}]}")), `pools[0].sessionSticky.sources[1].type: unknown source type "Heder" (want Header, Query, Cookie, JWTClaim, Token or Body)`},
		{"source type case", doc("", pool("sessionSticky: {sources: [{type: header, name: X}]}")), `pools[0].sessionSticky.sources[0].type: unknown source type "header"`},
		{"source name", doc("", pool("sessionSticky: {sources: [{type: Cookie}]}")), `pools[0].sessionSticky.sources[0].name: required for a Cookie source`},
		{"header name", doc("", pool("sessionSticky: {sources: [{type: Header, name: X Session}]}")), `pools[0].sessionSticky.sources[0].name: "X Session" is not a valid HTTP header name`},
		{"cookie name", doc("", pool("sessionSticky: {sources: [{type: Cookie, name: \"a;b\"}]}")), `pools[0].sessionSticky.sources[0].name: "a;b" is not a valid cookie name`},
		{"JWTClaim without jwt", doc("", pool("sessionSticky: {sources: [{type: JWTClaim, name: sub}]}")), `pools[0].sessionSticky.sources[0].type: a JWTClaim source needs the jwt block`},
		{"no backends", doc("", pool("backends: {}")), `pools[0].backends: exactly one of static, kubernetes, prefill+decode or modelServer is required`},
		{"two kinds of backends", doc("", pool(`backends: {static: ["a:1"], kubernetes: {selector: app=m, port: 80}}`)), `pools[0].backends: exactly one of static, kubernetes, prefill+decode or modelServer is required`},
		{"static form", doc("", pool(static2("127.0.0.1:8001", "localhost"))), `pools[0].backends.static[1]: must be host:port, got "localhost"`},
		{"static duplicate", doc("", pool(static2("127.0.0.1:8001", "127.0.0.1:8001"))), `pools[0].backends.static[1]: duplicate backend "127.0.0.1:8001"`},
		{"kubernetes selector", doc("", pool("backends: {kubernetes: {port: 80}}")), `pools[0].backends.kubernetes.selector: required`},
		{"kubernetes selector syntax", doc("", pool("backends: {kubernetes: {selector: '!!', port: 80}}")), `pools[0].backends.kubernetes.selector: invalid label selector`},
		{"kubernetes port", doc("", pool("backends: {kubernetes: {selector: app=m}}")), `pools[0].backends.kubernetes.port: port or portName is required`},
		{"kubernetes port and name", doc("", pool("backends: {kubernetes: {selector: app=m, port: 80, portName: http}}")), `pools[0].backends.kubernetes.port: set port or portName, not both`},
		{"kubernetes port range", doc("", pool("backends: {kubernetes: {selector: app=m, port: 70000}}")), `pools[0].backends.kubernetes.port: must be 1..65535, got 70000`},
		{"PD half", doc("", pool("backends: {prefill: {selector: r=p, port: 80}}")), `pools[0].backends: a PD pool needs both prefill and decode`},
		{"PD decode selector", doc("", pool("backends: {prefill: {selector: r=p, port: 80}, decode: {port: 80}}")), `pools[0].backends.decode.selector: required`},
		{"PD header", doc("", pool("backends: {prefill: {selector: r=p, port: 80}, decode: {selector: r=d, port: 80}, prefillHeader: \"a b\"}")), `pools[0].backends.prefillHeader: "a b" is not a valid HTTP header name`},
		{"affinity mode", doc("", pool("affinity: {mode: medium}")), `pools[0].affinity.mode: unknown mode "medium" (want hard or soft)`},
		{"affinity maxWaiting", doc("", pool("affinity: {maxWaiting: -1}")), `pools[0].affinity.maxWaiting: must be 0 or more, got -1`},
		{"affinity loadMargin", doc("", pool("affinity: {loadMargin: -2}")), `pools[0].affinity.loadMargin: must be 0 or more, got -2`},
		{"affinity cooldown", doc("", pool("affinity: {mode: soft, cooldown: -1s}")), `pools[0].affinity.cooldown: must not be negative, got -1s`},
		{"affinity placement", doc("", pool("affinity: {placement: random}")), `pools[0].affinity.placement: unknown placement "random" (want hash or leastLoaded)`},
		{"affinity hashEpsilon", doc("", pool("affinity: {hashEpsilon: -0.5}")), `pools[0].affinity.hashEpsilon: must be between 0 and 10, got -0.5`},
		{"affinity bindingEpsilon", doc("", pool("affinity: {bindingEpsilon: 11}")), `pools[0].affinity.bindingEpsilon: must be between 0 and 10, got 11`},
		{"affinity workEpsilon", doc("", pool("affinity: {workEpsilon: -0.5}")), `pools[0].affinity.workEpsilon: must be between 0 and 10, got -0.5`},
		{"soft without load", doc("", pool("affinity: {mode: soft}", "loadMetrics: {enabled: false}")), `pools[0].affinity.mode: soft affinity needs loadMetrics`},
		{"load interval", doc("", pool("loadMetrics: {interval: -1s}")), `pools[0].loadMetrics.interval: must be positive, got -1s`},
		{"load timeout", doc("", pool("loadMetrics: {interval: 1s, timeout: 2s}")), `pools[0].loadMetrics.timeout: must be positive and at most interval (1s), got 2s`},
		{"load path", doc("", pool("loadMetrics: {path: metrics}")), `pools[0].loadMetrics.path: must start with /, got "metrics"`},
		{"load name", doc("", pool("loadMetrics: {waiting: [ok, \"a b\"]}")), `pools[0].loadMetrics.waiting[1]: "a b" is not a metric name`},
		{"token header", doc("", pool("sessionToken: {keyFile: k, header: \"a b\"}")), `pools[0].sessionToken.header: "a b" is not a valid HTTP header name`},
		{"token key", doc("", pool("sessionToken: {}")), `pools[0].sessionToken.keyFile: required`},
		{"Token without sessionToken", doc("", pool("sessionSticky: {sources: [{type: Token, name: x-session-token}]}")), `pools[0].sessionSticky.sources[0].type: a Token source needs the pool's sessionToken block`},
		{"Token alone", doc("", pool("sessionSticky: {sources: [{type: Token, name: x-session-token}]}", "sessionToken: {keyFile: k}")), `pools[0].sessionSticky.sources: a Token source needs another source that names the session (Header, Query, Cookie or JWTClaim): tokens are issued only to requests with a session key`},
		{"Token header name", doc("", pool("sessionSticky: {sources: [{type: Token, name: \"a b\"}]}", "sessionToken: {keyFile: k}")), `pools[0].sessionSticky.sources[0].name: "a b" is not a valid HTTP header name`},
		{"shared listen needs models", doc("", pool("name: a"), pool("name: b", "models: [m]")), `pools[0].models: required when several pools share listen 127.0.0.1:17001`},
		{"model served twice", doc("", pool("name: a", "models: [m1, m2]"), pool("name: b", "models: [m2]")), `pools[1].models: model "m2" is also served by pools[0] on listen 127.0.0.1:17001`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v\nwant it to contain %q\ndocument:\n%s", err, tc.want, tc.doc)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v holds no *FieldError", err)
			}
		})
	}
}

// TestValidationAllErrors: every problem is reported at once, in document
// order, each as a *FieldError.
func TestValidationAllErrors(t *testing.T) {
	_, err := Parse([]byte(doc("listen: x\nstore: {backend: etcd}",
		pool("name: a", "sessionSticky: {sources: [{type: Heder, name: X}]}"),
		pool("name: b", "backends: {}"),
		pool("name: c", "listen: 127.0.0.1:2", "models: [m]"),
		pool("name: d", "listen: 127.0.0.1:2"),
	)))
	if err == nil {
		t.Fatal("no error")
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	// Pools a and b inherit the bad listen and share it, so both need models.
	want := []string{"listen", "store.backend", "pools[0].listen", "pools[0].sessionSticky.sources[0].type",
		"pools[1].listen", "pools[1].backends", "pools[0].models", "pools[1].models", "pools[3].models"}
	if !reflect.DeepEqual(fields, want) {
		t.Fatalf("fields = %q\nwant %q", fields, want)
	}
}

// TestSoftAndTokenDefaults: soft pools get a cool-down and load scraping
// with the vLLM and SGLang names; hard pools get neither (their rendered
// config stays as it was); a sessionToken block gets its header names.
func TestSoftAndTokenDefaults(t *testing.T) {
	c, err := Parse([]byte(doc("", pool("name: s", "models: [s]", "affinity: {mode: soft}", "sessionToken: {keyFile: k}"), pool("name: h", "models: [h]"))))
	if err != nil {
		t.Fatal(err)
	}
	s, h := c.Pools[0], c.Pools[1]
	if s.Affinity.Cooldown.Duration != DefaultAffinityCooldown || s.Load() == nil {
		t.Fatalf("soft pool: cooldown %s, loadMetrics %+v", s.Affinity.Cooldown, s.Load())
	}
	l := s.Load()
	if l.Interval.Duration != time.Second || l.Timeout.Duration != 500*time.Millisecond || l.Path != "/metrics" ||
		!reflect.DeepEqual(l.Waiting, []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}) ||
		!reflect.DeepEqual(l.KVUsage, []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}) {
		t.Fatalf("loadMetrics defaults = %+v", l)
	}
	if s.SessionToken.Header != "x-session-token" || s.SessionToken.PrefillHeader != "x-session-token-prefill" || s.SessionToken.Cookie != nil {
		t.Fatalf("sessionToken defaults = %+v", s.SessionToken)
	}
	if h.Affinity.Cooldown.Duration != 0 || h.Load() != nil || s.LoadMetrics != nil {
		t.Fatalf("rendered config got soft defaults: %+v %+v %+v", h.Affinity, h.LoadMetrics, s.LoadMetrics)
	}
	c, err = Parse([]byte(doc("", pool("affinity: {cooldown: 5s}", "loadMetrics: {interval: 2s}"))))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Pools[0]; p.Affinity.Cooldown.Duration != 5*time.Second || p.Load().Interval.Duration != 2*time.Second || p.Load().Timeout.Duration != DefaultLoadTimeout {
		t.Fatalf("explicit values: %+v %+v", p.Affinity, p.Load())
	}
	off := false
	if (&LoadMetrics{Enabled: &off}).On() {
		t.Fatal("enabled: false is on")
	}
}

func TestValidateSourcesPrefix(t *testing.T) {
	var got []string
	ValidateSources(func(suffix, format string, a ...any) {
		got = append(got, "tether.dev/sources"+suffix)
	}, []Source{{Type: "Header", Name: "ok"}, {Type: "Nope", Name: "x"}, {Type: "JWTClaim", Name: "sub"}}, false)
	want := []string{"tether.dev/sources[1].type", "tether.dev/sources[2].type"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Proxy{FailTimeout: Duration{1500 * time.Millisecond}})
	if err != nil || !strings.Contains(string(b), `"failTimeout":"1.5s"`) {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var p Proxy
	if err := json.Unmarshal(b, &p); err != nil || p.FailTimeout.Duration != 1500*time.Millisecond {
		t.Fatalf("Unmarshal = %+v, %v", p, err)
	}
}

func TestGossipInsecure(t *testing.T) {
	c, err := Parse([]byte(doc("store: {backend: gossip, gossip: {insecure: true}}")))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Store.Gossip.Insecure || c.Store.Gossip.SecretKeyFile != "" {
		t.Fatalf("gossip = %+v", c.Store.Gossip)
	}
}

// TestListeners: pools are grouped by their listen address in order of
// first use, a pool without listen on the top-level one.
func TestListeners(t *testing.T) {
	c, err := Parse([]byte(doc("listen: 127.0.0.1:9000",
		pool("name: a", "models: [a]"),
		pool("name: b", "listen: 127.0.0.1:9001"),
		pool("name: c", "models: [c]"))))
	if err != nil {
		t.Fatal(err)
	}
	want := []Listener{{Addr: "127.0.0.1:9000", Pools: []int{0, 2}}, {Addr: "127.0.0.1:9001", Pools: []int{1}}}
	if got := c.Listeners(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Listeners = %+v, want %+v", got, want)
	}
}

// TestFailureHandlingDefaults: the deprecated proxy fields still mean
// what they meant, a pool's proxy block overrides the top-level one field
// by field, and a health check gets its defaults.
func TestFailureHandlingDefaults(t *testing.T) {
	c, err := Parse([]byte(doc("proxy: {failTimeout: 10s, responseHeaderTimeout: 0s}")))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Proxy.OutlierDetection.BaseEjectionTime.Duration; got != 10*time.Second {
		t.Errorf("failTimeout 10s: baseEjectionTime = %s, want 10s (the old fail timeout)", got)
	}
	if got := c.Proxy.OutlierDetection.MaxEjectionTime.Duration; got != DefaultMaxEjectionTime {
		t.Errorf("maxEjectionTime = %s", got)
	}
	if got := c.Proxy.FirstByteTimeout.Duration; got != DefaultFirstByteTimeout {
		t.Errorf("responseHeaderTimeout 0s (no limit, as rendered before): firstByteTimeout = %s, want the default", got)
	}
	c, err = Parse([]byte(doc("proxy: {responseHeaderTimeout: 7s, outlierDetection: {baseEjectionTime: 10m}}")))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Proxy.FirstByteTimeout.Duration; got != 7*time.Second {
		t.Errorf("responseHeaderTimeout 7s: firstByteTimeout = %s", got)
	}
	if got := c.Proxy.OutlierDetection.MaxEjectionTime.Duration; got != 10*time.Minute {
		t.Errorf("baseEjectionTime 10m: maxEjectionTime = %s, want at least the base", got)
	}

	c, err = Parse([]byte(doc("proxy: {firstByteTimeout: 30s, outlierDetection: {consecutiveFailures: 3, maxEjectionPercent: 20}}",
		pool("name: a", "models: [a]", "proxy: {firstByteTimeout: 5m, outlierDetection: {enabled: false, maxEjectionPercent: 100}}"),
		pool("name: b", "models: [b]", `backends: {static: ["127.0.0.1:1"], healthCheck: {interval: 500ms}}`))))
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.ProxyFor(&c.Pools[0]), c.ProxyFor(&c.Pools[1])
	if a.FirstByteTimeout.Duration != 5*time.Minute || a.OutlierDetection.On() || a.OutlierDetection.MaxEjectionPercent != 100 ||
		a.OutlierDetection.ConsecutiveFailures != 3 || a.OutlierDetection.BaseEjectionTime.Duration != DefaultBaseEjectionTime {
		t.Errorf("pool a's proxy = %+v %+v", a, *a.OutlierDetection)
	}
	if b.FirstByteTimeout.Duration != 30*time.Second || !b.OutlierDetection.On() || b.OutlierDetection.MaxEjectionPercent != 20 {
		t.Errorf("pool b's proxy = %+v %+v", b, *b.OutlierDetection)
	}
	if c.Proxy.OutlierDetection.MaxEjectionPercent != 20 {
		t.Error("a pool's override changed the top-level block")
	}
	if !a.RetriesOnTimeout() || !b.RetriesOnTimeout() {
		t.Error("retryOnTimeout unset: a first-byte timeout is not retried, want retried (the default)")
	}
	off, err := Parse([]byte(doc("proxy: {retryOnTimeout: false}",
		pool("name: a", "models: [a]", "proxy: {retryOnTimeout: true}"), pool("name: b", "models: [b]"))))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := off.ProxyFor(&off.Pools[0]).RetriesOnTimeout(), off.ProxyFor(&off.Pools[1]).RetriesOnTimeout(); !a || b {
		t.Errorf("retryOnTimeout false, pool a's true: a retries %v, b retries %v; want true, false", a, b)
	}
	want := HealthCheck{Path: DefaultHealthCheckPath, Interval: Duration{500 * time.Millisecond}, Timeout: Duration{500 * time.Millisecond},
		UnhealthyThreshold: DefaultUnhealthyThreshold, HealthyThreshold: DefaultHealthyThreshold}
	if h := c.Pools[1].Backends.HealthCheck; h == nil || *h != want {
		t.Errorf("health check = %+v, want %+v", h, want)
	}
}

func TestDebugLoopbackAccepted(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:17021", "127.0.0.2:0", "[::1]:17021", "localhost:17021"} {
		if _, err := Parse([]byte(doc("debug: \"" + addr + "\""))); err != nil {
			t.Errorf("debug %s: %v", addr, err)
		}
	}
}

func TestRequireAtStartupDefaultsTrue(t *testing.T) {
	c, err := Parse([]byte(doc("store: {backend: redis, redis: {address: a:1}, gossip: {insecure: true}}")))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Store.Redis.Required() || !c.Store.Gossip.Required() {
		t.Fatal("requireAtStartup must default to true")
	}
	c, err = Parse([]byte(doc("store: {backend: redis, redis: {address: a:1, requireAtStartup: false}, gossip: {insecure: true, requireAtStartup: false}}")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Redis.Required() || c.Store.Gossip.Required() {
		t.Fatal("requireAtStartup: false not honoured")
	}
}

// TestPoolsWithoutSessionSticky: a pool without sessionSticky is a plain
// load-balanced pool (Kthena's nil sessionSticky); an unset TTL gets the
// default while an explicit one is kept as written.
func TestPoolsWithoutSessionSticky(t *testing.T) {
	c, err := Parse([]byte(doc("", pool("sessionSticky: null"))))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Pools[0]; p.SessionSticky != nil || p.SessionSticky.TTL() != 0 {
		t.Fatalf("non-sticky pool: %+v, TTL %s", p.SessionSticky, p.SessionSticky.TTL())
	}
	c, err = Parse([]byte(doc("", pool("name: a", "models: [a]", "sessionSticky: {sources: [{type: Query, name: s}]}"),
		pool("name: b", "models: [b]", "sessionSticky: {sessionAffinitySeconds: 7, sources: [{type: Query, name: s}]}"))))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := c.Pools[0].SessionSticky, c.Pools[1].SessionSticky; *a.SessionAffinitySeconds != DefaultSessionAffinitySeconds ||
		a.TTL() != DefaultSessionAffinitySeconds*time.Second || *b.SessionAffinitySeconds != 7 || b.TTL() != 7*time.Second {
		t.Fatalf("TTLs: %+v %+v", a, b)
	}
	// Before defaults, an unset TTL already reads as the default.
	if ttl := (&SessionSticky{}).TTL(); ttl != DefaultSessionAffinitySeconds*time.Second {
		t.Fatalf("unset TTL = %s", ttl)
	}
	// A runtime block is checked by the same rules, under the path given.
	err = (&SessionSticky{SessionAffinitySeconds: Seconds(0), Sources: []Source{{Type: SourceToken, Name: "x"}}}).
		Validate("spec.trafficPolicy.sessionSticky", false, false)
	for _, want := range []string{"spec.trafficPolicy.sessionSticky.sessionAffinitySeconds: must be at least 1 when set, got 0",
		"spec.trafficPolicy.sessionSticky.sources[0].type: a Token source needs the pool's sessionToken block"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate = %v, want %q", err, want)
		}
	}
}

// TestModelServerPool: a pool defined by a ModelServer needs no sources
// or models in the config (the object has them), may share a listener
// without models, and gets the PD prefill header for when the object is
// a PD pool.
func TestModelServerPool(t *testing.T) {
	c, err := Parse([]byte(doc("", pool("name: a", "sessionSticky: null", "backends: {modelServer: {namespace: llm, name: ds}}"),
		pool("name: b", "models: [m]"))))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pools[0]
	if m := p.Backends.ModelServer; m == nil || m.String() != "llm/ds" || p.Backends.PrefillHeader != DefaultPrefillHeader {
		t.Fatalf("modelServer pool = %+v", p.Backends)
	}
	if s := (ModelServerRef{Name: "ds"}).String(); s != "ds" {
		t.Fatalf("String without namespace = %q", s)
	}
}

// TestTokenCookieDefaults: the cookie block gets its name and SameSite.
func TestTokenCookieDefaults(t *testing.T) {
	c, err := Parse([]byte(doc("", pool("sessionToken: {keyFile: k, cookie: {}}"))))
	if err != nil {
		t.Fatal(err)
	}
	if ck := c.Pools[0].SessionToken.Cookie; ck == nil || ck.Name != DefaultTokenCookieName || ck.SameSite != SameSiteLax || ck.Secure {
		t.Fatalf("cookie defaults = %+v", ck)
	}
	c, err = Parse([]byte(doc("", pool("sessionToken: {keyFile: k, cookie: {name: sid, secure: true, sameSite: None}}"))))
	if err != nil {
		t.Fatal(err)
	}
	if ck := c.Pools[0].SessionToken.Cookie; ck.Name != "sid" || ck.SameSite != SameSiteNone || !ck.Secure {
		t.Fatalf("cookie = %+v", ck)
	}
}
