// Package config is tether-sidecar's configuration: one typed schema read
// from YAML or JSON, with defaults applied in one place (SetDefaults) and
// a Validate that names the field and the rule of every problem it finds.
// The words a config chooses among are named types (SourceType,
// StoreBackend, AffinityMode), and Listeners groups the pools by the
// address they are served on. The injector imports this package to turn
// pod annotations into the same schema, so a configuration the webhook
// accepts is one the sidecar starts with.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Config is the whole sidecar configuration. Field names are a public
// contract (README "Configuration"); add fields, never rename them.
type Config struct {
	// Listen is where pools without a listen of their own are served.
	Listen string `json:"listen,omitempty"`
	// Admin serves /healthz, /readyz and /metrics (kubelet probes and
	// Prometheus reach it on the pod IP), and /debug/* too when it is a
	// loopback address and Debug is unset.
	Admin string `json:"admin,omitempty"`
	// Debug serves /debug/* (bindings, config, backends, pprof, log
	// level). It must be a loopback address: what it reveals and changes
	// is for someone inside the pod. Unset: /debug/* is served on Admin
	// when that is a loopback address, nowhere otherwise.
	Debug string `json:"debug,omitempty"`
	Store Store  `json:"store,omitempty"`
	// JWT is needed only by JWTClaim sources.
	JWT   *JWT   `json:"jwt,omitempty"`
	Proxy Proxy  `json:"proxy,omitempty"`
	Pools []Pool `json:"pools"`
}

// Store selects and configures where bindings live.
type Store struct {
	Backend StoreBackend `json:"backend,omitempty"`
	Memory  MemoryStore  `json:"memory,omitempty"`
	Redis   *RedisStore  `json:"redis,omitempty"`
	Gossip  *GossipStore `json:"gossip,omitempty"`
	// KeySecretFile holds a secret that makes store keys an HMAC-SHA256 of
	// (pool, session key) instead of a plain SHA-256, so a Redis dump or a
	// gossip capture cannot be tested against guessed keys. Its first line
	// is the secret (a gossip key file works as it is); at least 16 bytes.
	KeySecretFile string `json:"keySecretFile,omitempty"`
}

// StoreBackend says where bindings live.
type StoreBackend string

// Store backends.
const (
	StoreMemory StoreBackend = "memory"
	StoreGossip StoreBackend = "gossip"
	StoreRedis  StoreBackend = "redis"
)

// MemoryStore bounds the per-process store.
type MemoryStore struct {
	MaxEntries int `json:"maxEntries,omitempty"`
}

// RedisStore configures the shared Redis store (single node, Sentinel or Cluster).
type RedisStore struct {
	Address      string   `json:"address,omitempty"`
	Addresses    []string `json:"addresses,omitempty"`
	MasterName   string   `json:"masterName,omitempty"`
	Username     string   `json:"username,omitempty"`
	PasswordFile string   `json:"passwordFile,omitempty"`
	TLS          bool     `json:"tls,omitempty"`
	CAFile       string   `json:"caFile,omitempty"` // PEM CAs instead of the system roots (a private CA)
	DB           int      `json:"db,omitempty"`
	Timeout      Duration `json:"timeout,omitempty"`
	KeyPrefix    string   `json:"keyPrefix,omitempty"`
	// RequireAtStartup (default true) makes an unreachable Redis at start
	// fatal, naming the address and the cause. false starts degraded
	// (unsticky, ready, the breaker open) and connects in the background.
	RequireAtStartup *bool `json:"requireAtStartup,omitempty"`
}

// Required reports whether Redis must answer before the sidecar starts.
func (r *RedisStore) Required() bool { return r.RequireAtStartup == nil || *r.RequireAtStartup }

// GossipStore configures the memberlist ring shared by router replicas.
type GossipStore struct {
	Bind          string   `json:"bind,omitempty"`
	Advertise     string   `json:"advertise,omitempty"`
	Join          []string `json:"join,omitempty"`
	Discovery     string   `json:"discovery,omitempty"` // static | kubernetes | dns
	PeerSelector  string   `json:"peerSelector,omitempty"`
	DNSName       string   `json:"dnsName,omitempty"`
	SecretKeyFile string   `json:"secretKeyFile,omitempty"`
	MaxEntries    int      `json:"maxEntries,omitempty"`
	// Insecure runs the ring without SecretKeyFile (the key that encrypts
	// and authenticates gossip; several keys, one per line, while one is
	// rotated): plaintext, and anyone who can reach the gossip port can
	// rewrite bindings. It must be set explicitly.
	Insecure bool `json:"insecure,omitempty"`
	// RequireAtStartup (default true) keeps the sidecar unready until it
	// has pulled the ring's state (or found no peer to pull from). false
	// makes it ready at once; it joins and pulls in the background, and
	// sessions it binds meanwhile settle by the conflict rule.
	RequireAtStartup *bool `json:"requireAtStartup,omitempty"`
}

// Required reports whether readiness waits for the ring's state.
func (g *GossipStore) Required() bool { return g.RequireAtStartup == nil || *g.RequireAtStartup }

// Gossip peer discovery modes.
const (
	PeersStatic     = "static"
	PeersKubernetes = "kubernetes"
	PeersDNS        = "dns"
)

// JWT configures verification of bearer tokens for JWTClaim sources.
type JWT struct {
	HMACSecretFile string   `json:"hmacSecretFile,omitempty"`
	PublicKeyFiles []string `json:"publicKeyFiles,omitempty"`
	JWKSFile       string   `json:"jwksFile,omitempty"`
	Algorithms     []string `json:"algorithms,omitempty"`
	Issuer         string   `json:"issuer,omitempty"`
	Audience       string   `json:"audience,omitempty"`
	// RequireExp refuses tokens without an exp claim (expired ones are
	// always refused), so that a leaked token cannot pin a session for
	// good: for issuers that always set exp.
	RequireExp bool `json:"requireExp,omitempty"`
}

// Proxy tunes the forwarding path. Every field has a safe default.
type Proxy struct {
	// MaxRequestBodyBytes bounds a request body; larger bodies get 413.
	MaxRequestBodyBytes int64 `json:"maxRequestBodyBytes,omitempty"`
	// MaxRequestHeaderBytes bounds request headers; larger headers get 431.
	MaxRequestHeaderBytes int `json:"maxRequestHeaderBytes,omitempty"`
	// FailTimeout is deprecated: outlierDetection.baseEjectionTime
	// replaced it (a backend that refuses a connection is ejected). When
	// it is set and baseEjectionTime is not, it is the base ejection time,
	// so configs rendered before keep their behaviour.
	FailTimeout Duration `json:"failTimeout,omitzero"`
	// DialTimeout bounds connecting to a backend.
	DialTimeout Duration `json:"dialTimeout,omitempty"`
	// ResponseHeaderTimeout is deprecated: firstByteTimeout replaced it.
	// When it is set (above 0) and firstByteTimeout is not, it is the
	// firstByteTimeout.
	ResponseHeaderTimeout Duration `json:"responseHeaderTimeout,omitzero"`
	// FirstByteTimeout bounds the wait for a backend's response headers
	// after the request was sent (prefill and queueing; for a request that
	// does not stream, the whole completion): past it the request gets
	// 504 and the backend a failure for outlier detection. A pool's
	// proxy block may set its own.
	FirstByteTimeout Duration `json:"firstByteTimeout,omitempty"`
	// RetryOnTimeout, true when unset, retries a request whose backend
	// sent no response headers within firstByteTimeout once on another
	// backend (the session is rebound there), as Envoy's per_try_timeout
	// and HAProxy's retry-on response-timeout do; false answers 504 at
	// once. A pool's proxy block may set its own.
	RetryOnTimeout *bool `json:"retryOnTimeout,omitempty"`
	// OutlierDetection ejects backends that fail; a pool's proxy block
	// may set its own.
	OutlierDetection OutlierDetection `json:"outlierDetection,omitempty"`
	// ShutdownTimeout is how long in-flight requests may drain on SIGTERM.
	ShutdownTimeout Duration `json:"shutdownTimeout,omitempty"`
	// BodyReadTimeout is how long a request body may go without a byte
	// before the request is answered 408 and its connection closed (1 to
	// 1.5 times it: the deadline is moved lazily, as streamIdleTimeout's).
	BodyReadTimeout Duration `json:"bodyReadTimeout,omitempty"`
	// StreamIdleTimeout is how long a request in flight may go without a
	// byte moving once its body is read: the backend taking none of the
	// request, sending none of its response body after the headers (a
	// stream hung mid-way), or the client taking none of the response
	// (it stopped reading). Past it the connections are closed. The wait
	// for the response headers is firstByteTimeout's.
	StreamIdleTimeout Duration `json:"streamIdleTimeout,omitempty"`
	// MaxConcurrentRequests bounds the requests one listener serves at
	// once; beyond it requests get 503 with Retry-After.
	MaxConcurrentRequests int `json:"maxConcurrentRequests,omitempty"`
}

// Pool is one ModelServer: its listener, session sources and backends.
type Pool struct {
	Name   string   `json:"name"`
	Listen string   `json:"listen,omitempty"`
	Models []string `json:"models,omitempty"`
	// SessionSticky turns stickiness on, as Kthena's non-nil sessionSticky
	// does: a pool without it is balanced on every request and binds
	// nothing. A pool defined by a ModelServer (backends.modelServer) takes
	// it from the object instead.
	SessionSticky *SessionSticky `json:"sessionSticky,omitempty"`
	Backends      Backends       `json:"backends"`
	Affinity      Affinity       `json:"affinity,omitempty"`
	// LoadMetrics scrapes the backends' queue lengths for balancing and
	// soft affinity; nil means not scraped.
	LoadMetrics *LoadMetrics `json:"loadMetrics,omitempty"`
	// SessionToken writes the chosen backend into an authenticated
	// response token that Token sources read back; nil means off.
	SessionToken *SessionToken `json:"sessionToken,omitempty"`
	// Proxy overrides the top-level proxy block's per-pool settings for
	// this pool (Config.ProxyFor); nil means none.
	Proxy *PoolProxy `json:"proxy,omitempty"`
}

// Listener is one address the sidecar serves pools on.
type Listener struct {
	Addr string
	// Pools are the indexes in Config.Pools of the pools served here, in
	// document order; with more than one, a request's "model" picks.
	Pools []int
}

// Listeners groups the pools by their listen address, in order of first
// use (so errors and startup come in document order). Call SetDefaults
// first: a pool without listen is served on Config.Listen.
func (c *Config) Listeners() []Listener {
	var ls []Listener
	at := map[string]int{}
	for i, p := range c.Pools {
		j, seen := at[p.Listen]
		if !seen {
			j = len(ls)
			at[p.Listen] = j
			ls = append(ls, Listener{Addr: p.Listen})
		}
		ls[j].Pools = append(ls[j].Pools, i)
	}
	return ls
}

// LoadMetrics configures scraping each backend's Prometheus endpoint.
// Metric names are lists: the first one a backend exposes is used, so one
// list covers vLLM (both generations of names) and SGLang.
type LoadMetrics struct {
	// Enabled defaults to true when the block is present.
	Enabled  *bool    `json:"enabled,omitempty"`
	Interval Duration `json:"interval,omitempty"`
	Timeout  Duration `json:"timeout,omitempty"`
	Path     string   `json:"path,omitempty"`
	Waiting  []string `json:"waiting,omitempty"`
	Running  []string `json:"running,omitempty"`
	KVUsage  []string `json:"kvUsage,omitempty"`
}

// On reports whether scraping is enabled.
func (l *LoadMetrics) On() bool { return l != nil && (l.Enabled == nil || *l.Enabled) }

// Load is the pool's effective load scraping: the loadMetrics block, or
// for a soft pool without one the defaults (soft affinity decides on
// scraped queues). nil when nothing is scraped.
func (p *Pool) Load() *LoadMetrics {
	if p.LoadMetrics == nil && p.Affinity.Mode == AffinitySoft {
		l := &LoadMetrics{}
		l.setDefaults()
		return l
	}
	if !p.LoadMetrics.On() {
		return nil
	}
	return p.LoadMetrics
}

// RoutingHeaders are the request headers that carry the sidecar's own
// routing state for this pool, which a client's value must never reach a
// backend in: the PD prefill headers (the sidecar sets them for the decode
// pod; a client's value would aim its prefill request at a host of the
// client's choosing, so the defaults are listed for every pool), the
// endpoint header of the Gateway API inference extension, and the session
// tokens (the sidecar's routing state, not the model server's business).
func (p *Pool) RoutingHeaders() []string {
	hs := []string{DefaultPrefillHeader, "x-gateway-destination-endpoint"}
	if p.Backends.PrefillHeader != "" {
		hs = append(hs, p.Backends.PrefillHeader)
	}
	if t := p.SessionToken; t != nil {
		hs = append(hs, t.Header, t.PrefillHeader)
	}
	if p.SessionSticky != nil {
		for _, s := range p.SessionSticky.Sources {
			if s.Type == SourceToken {
				hs = append(hs, s.Name)
			}
		}
	}
	return hs
}

// SessionToken configures tether's stateless session tokens.
type SessionToken struct {
	// Header is the response header the token of the chosen backend is
	// written to (a Token source reads it back from requests).
	Header string `json:"header,omitempty"`
	// PrefillHeader carries the token of the prefill pod in PD pools.
	PrefillHeader string `json:"prefillHeader,omitempty"`
	// KeyFile holds the HMAC-SHA256 key that signs and verifies tokens.
	KeyFile string `json:"keyFile,omitempty"`
	// PreviousKeyFile holds the key being rotated out: still verified.
	PreviousKeyFile string `json:"previousKeyFile,omitempty"`
	// AllowUnsigned accepts llm-d's plain base64("namespace/name") tokens
	// (in Header and, for the prefill half of a PD pair, PrefillHeader),
	// with which a client can aim at any pod of the pool.
	AllowUnsigned bool `json:"allowUnsigned,omitempty"`
	// Cookie also sets the token as an HttpOnly cookie and reads it back,
	// for browser clients that carry cookies but no custom headers; nil
	// means headers only.
	Cookie *TokenCookie `json:"cookie,omitempty"`
}

// TokenCookie is the cookie a session token travels in (HAProxy's
// "cookie ... insert", Envoy's stateful-session cookie): set on every
// response with Max-Age = the pool's TTL, HttpOnly, Path=/.
type TokenCookie struct {
	// Name of the cookie; default DefaultTokenCookieName.
	Name string `json:"name,omitempty"`
	// Secure marks the cookie Secure (sent over HTTPS only). Off by
	// default: the sidecar sees plain HTTP from the router, which is
	// where TLS ended; turn it on where browsers reach the site by HTTPS.
	Secure bool `json:"secure,omitempty"`
	// SameSite is Lax (default), Strict or None (None needs secure).
	SameSite string `json:"sameSite,omitempty"`
}

// SameSite values of TokenCookie.
const (
	SameSiteLax    = "Lax"
	SameSiteStrict = "Strict"
	SameSiteNone   = "None"
)

// SessionSticky is the sticky-session block of Kthena's API, parsed
// unchanged: sources tried in order, and the binding TTL.
type SessionSticky struct {
	// SessionAffinitySeconds is the binding's sliding TTL. Unset means
	// DefaultSessionAffinitySeconds; a value that is set must be at least
	// 1 (an explicit 0 is refused, as Kthena's admission refuses it).
	SessionAffinitySeconds *int     `json:"sessionAffinitySeconds,omitempty"`
	Sources                []Source `json:"sources"`
}

// TTL is the binding's sliding time to live: 0 for a pool without
// sessionSticky (nil), the default when sessionAffinitySeconds is unset.
func (s *SessionSticky) TTL() time.Duration {
	switch {
	case s == nil:
		return 0
	case s.SessionAffinitySeconds == nil:
		return DefaultSessionAffinitySeconds * time.Second
	}
	return time.Duration(*s.SessionAffinitySeconds) * time.Second
}

// Seconds returns a pointer to n, for SessionSticky.SessionAffinitySeconds.
func Seconds(n int) *int { return &n }

// Source is one place a session key may come from.
type Source struct {
	Type SourceType `json:"type"`
	Name string     `json:"name"`
}

// SourceType is the kind of place a session key is read from.
type SourceType string

// Source types.
const (
	SourceHeader   SourceType = "Header"
	SourceQuery    SourceType = "Query"
	SourceCookie   SourceType = "Cookie"
	SourceJWTClaim SourceType = "JWTClaim"
	// SourceToken reads the header Name as a session token written by
	// the sidecar (pool.sessionToken): it names a backend, not a session.
	SourceToken SourceType = "Token"
	// SourceBody reads the string at the dotted path Name of the JSON
	// request body (prompt_cache_key, user, metadata.session_id).
	SourceBody SourceType = "Body"
)

// SourceTypes lists the valid source types in the order errors name them.
var SourceTypes = []SourceType{SourceHeader, SourceQuery, SourceCookie, SourceJWTClaim, SourceToken, SourceBody}

// Backends says where a pool's model servers are: a static list, a
// Kubernetes selector, prefill/decode selectors for PD pools, or a Kthena
// ModelServer.
type Backends struct {
	Static     []string      `json:"static,omitempty"`
	Kubernetes *KubeSelector `json:"kubernetes,omitempty"`
	Prefill    *KubeSelector `json:"prefill,omitempty"`
	Decode     *KubeSelector `json:"decode,omitempty"`
	GroupLabel string        `json:"groupLabel,omitempty"`
	// PrefillHeader carries the prefill pod's host:port to the decode pod.
	PrefillHeader string `json:"prefillHeader,omitempty"`
	// HealthCheck actively checks static backends; nil means off
	// (Kubernetes backends are checked by their readiness probes).
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// ModelServer defines the pool by a Kthena ModelServer object: its
	// pods (workloadSelector, a PD pool with pdGroup), port, model,
	// timeout and sessionSticky, followed as the object changes.
	ModelServer *ModelServerRef `json:"modelServer,omitempty"`
}

// ModelServerRef names a networking.serving.volcano.sh/v1alpha1 ModelServer.
type ModelServerRef struct {
	// Namespace of the object; default the sidecar's own (POD_NAMESPACE).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String is namespace/name (name alone when the namespace is not set).
func (m ModelServerRef) String() string {
	if m.Namespace == "" {
		return m.Name
	}
	return m.Namespace + "/" + m.Name
}

// KubeSelector selects model-server pods.
type KubeSelector struct {
	Namespace string `json:"namespace,omitempty"`
	Selector  string `json:"selector"`
	Port      int    `json:"port,omitempty"`
	PortName  string `json:"portName,omitempty"`
}

// IsPD reports whether the pool routes to prefill/decode pairs.
func (b Backends) IsPD() bool { return b.Prefill != nil || b.Decode != nil }

// Affinity is the pool's pinning policy.
type Affinity struct {
	Mode       AffinityMode `json:"mode,omitempty"`
	MaxWaiting int          `json:"maxWaiting,omitempty"`
	LoadMargin int          `json:"loadMargin,omitempty"`
	// Cooldown is how long after a session was moved (a broken pin or a
	// rebind) soft affinity leaves it alone, so sessions do not flap.
	// SetDefaults sets DefaultAffinityCooldown in soft pools.
	Cooldown Duration `json:"cooldown,omitzero"`
	// Placement is how a new or moved session chooses its backend (README
	// "Placement"); "" is PlacementHash.
	Placement Placement `json:"placement,omitempty"`
	// HashEpsilon bounds hashed placement: a backend loaded more than
	// (1+ε) × the mean (plus one request) is passed over. nil is
	// balance.DefaultHashEpsilon (0.25).
	HashEpsilon *float64 `json:"hashEpsilon,omitempty"`
	// BindingEpsilon bounds hashed placement by the live sessions the
	// store counts (README "Placement"): a backend holding more than
	// (1+ε) × the mean bindings (plus one) is passed over. nil is
	// balance.DefaultBindingEpsilon (0.1).
	BindingEpsilon *float64 `json:"bindingEpsilon,omitempty"`
	// WorkEpsilon bounds hashed placement by the request bytes each
	// backend was sent recently, decaying by half every 30 s (README
	// "Placement"): a backend carrying more than (1+ε) × the mean is
	// passed over. Shared stores only, as BindingEpsilon (a gossip
	// ring's replicas read one view of it that they share). nil is
	// balance.DefaultWorkEpsilon (0.2).
	WorkEpsilon *float64 `json:"workEpsilon,omitempty"`
	// Policy is how soft affinity decides to move a pin (README
	// "Affinity policy"); "" is PolicyThreshold.
	Policy AffinityPolicy `json:"policy,omitempty"`
	// CostMargin (policy cost): move when another backend's expected time
	// to first token is lower by more than this share (0.25: the kept
	// pin's is over 1.25 times the move's). nil is DefaultCostMargin.
	CostMargin *float64 `json:"costMargin,omitempty"`
	// PrefillTokensPerSecond (policy cost) fixes the backends' prefill
	// rate instead of learning it from responses; 0 learns.
	PrefillTokensPerSecond int `json:"prefillTokensPerSecond,omitempty"`
}

// AffinityPolicy is how soft affinity decides to move a pin.
type AffinityPolicy string

// Soft-affinity policies.
const (
	// PolicyThreshold moves a pin whose backend has more than maxWaiting
	// requests waiting, loadMargin above the least-waiting other.
	PolicyThreshold AffinityPolicy = "threshold"
	// PolicyCost moves a pin when another backend is expected to reach
	// the first token sooner by costMargin: queue wait plus the prefill
	// of what each backend's cache lacks.
	PolicyCost AffinityPolicy = "cost"
)

// Placement is how a pool places a session that has no usable binding.
type Placement string

// Placements.
const (
	// PlacementHash places by the session key (rendezvous hashing with
	// bounded loads): every replica proposes the same backend for a key,
	// and routes by it while the store is down.
	PlacementHash Placement = "hash"
	// PlacementLeastLoaded places on the least-loaded backend (power of
	// two choices among near-equals), as before hashing existed.
	PlacementLeastLoaded Placement = "leastLoaded"
)

// AffinityMode is a pool's pinning policy.
type AffinityMode string

// Affinity modes.
const (
	// AffinityHard pins a session while its backend is selectable (Kthena's rule).
	AffinityHard AffinityMode = "hard"
	// AffinitySoft breaks a pin whose backend is overloaded by a margin.
	AffinitySoft AffinityMode = "soft"
)

// Duration is a time.Duration written as a Go duration string ("50ms", "5m").
type Duration struct{ time.Duration }

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"50ms\" or \"5m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Load reads, defaults and validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(b)
}

// MaxConfigBytes bounds the size of a configuration document.
const MaxConfigBytes = 1 << 20

// Parse decodes YAML or JSON strictly (unknown fields are errors), applies
// defaults and validates. The stores' default maxEntries follows the
// process's Go memory limit (GOMEMLIMIT, see MaxEntriesFor).
func Parse(b []byte) (*Config, error) {
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("config: document is %d bytes, limit is %d", len(b), MaxConfigBytes)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("config: document is empty")
	}
	// YAML (JSON is YAML) to JSON, refusing duplicate keys; then a
	// case-sensitive strict decode, as Kubernetes does: encoding/json would
	// match "Listen" or "NAME" to a field and let one silently override
	// the other, while these are unknown fields of this schema. Strict
	// errors name the field's path ("pools[0].sticky").
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	strict, err := kjson.UnmarshalStrict(j, &c)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("config: %w", errors.Join(strict...))
	}
	c.Store.DefaultMaxEntries(MaxEntriesFor(runtimeMemoryLimit()))
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}
