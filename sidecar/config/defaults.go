package config

import "time"

// Default ports. They stay clear of the ports service meshes take inside
// the pod (Istio 15000-15090, Linkerd 4140, 4143, 4191; ports_test.go
// checks them), of memberlist's usual 7946 (other memberlist rings, such
// as Loki's or MetalLB's, use it) and of the ephemeral range (32768+),
// so a sidecar next to istio-proxy or linkerd-proxy binds at once.
const (
	DefaultListenPort = 17001
	DefaultAdminPort  = 17020
	DefaultGossipPort = 17946
	// DefaultDebugPort is the loopback debug listener's port where the
	// injector renders one (the sidecar's own default leaves it unset).
	DefaultDebugPort = 17021
)

// Defaults, in one place. The README's configuration reference quotes them.
const (
	DefaultListen                 = "127.0.0.1:17001"
	DefaultAdmin                  = "127.0.0.1:17020"
	DefaultMaxEntries             = 1_000_000
	DefaultSessionAffinitySeconds = 300
	DefaultRedisTimeout           = 50 * time.Millisecond
	DefaultRedisKeyPrefix         = "tether"
	DefaultGossipBind             = "0.0.0.0:17946"
	DefaultMaxRequestBodyBytes    = 32 << 20
	DefaultMaxRequestHeaderBytes  = 64 << 10
	DefaultDialTimeout            = 2 * time.Second
	DefaultShutdownTimeout        = 30 * time.Second
	DefaultBodyReadTimeout        = 5 * time.Second
	DefaultMaxConcurrentRequests  = 4096
	DefaultPrefillHeader          = "x-prefiller-host-port"
	DefaultMaxWaiting             = 8
	DefaultLoadMargin             = 4
	DefaultAffinityCooldown       = 30 * time.Second
	// DefaultCostMargin: the cost policy moves a pin when another backend
	// is expected to reach the first token 25% sooner.
	DefaultCostMargin         = 0.25
	DefaultLoadInterval       = time.Second
	DefaultLoadTimeout        = 500 * time.Millisecond
	DefaultLoadPath           = "/metrics"
	DefaultSessionTokenHeader = "x-session-token"
	DefaultPrefillTokenHeader = "x-session-token-prefill" // llm-d's name
	DefaultTokenCookieName    = "tether-session"
	MaxSources                = 16
)

// Defaults of failure handling (README "Failure handling").
const (
	// DefaultFirstByteTimeout is generous for long prefills behind a queue.
	DefaultFirstByteTimeout = 120 * time.Second
	// DefaultStreamIdleTimeout is Envoy's stream_idle_timeout: far past
	// any pause of a model that is generating.
	DefaultStreamIdleTimeout = 5 * time.Minute
	// Outlier detection: Envoy's defaults, except the share of a pool that
	// may be ejected at once (Envoy's 10% would never eject in a pool of
	// fewer than ten backends but for its at-least-one rule).
	DefaultConsecutiveFailures = 5
	DefaultBaseEjectionTime    = 30 * time.Second
	DefaultMaxEjectionTime     = 300 * time.Second
	DefaultMaxEjectionPercent  = 50
	// Active health checks (static backends, when configured): vLLM's and
	// SGLang's liveness endpoint.
	DefaultHealthCheckPath     = "/health"
	DefaultHealthCheckInterval = 5 * time.Second
	DefaultHealthCheckTimeout  = time.Second
	DefaultUnhealthyThreshold  = 3
	DefaultHealthyThreshold    = 2
)

// SetDefaults fills every unset field that has a default. It is idempotent.
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Admin == "" {
		c.Admin = DefaultAdmin
	}
	c.Store.setDefaults()
	p := &c.Proxy
	if p.MaxRequestBodyBytes == 0 {
		p.MaxRequestBodyBytes = DefaultMaxRequestBodyBytes
	}
	if p.MaxRequestHeaderBytes == 0 {
		p.MaxRequestHeaderBytes = DefaultMaxRequestHeaderBytes
	}
	setDuration(&p.DialTimeout, DefaultDialTimeout)
	setDuration(&p.ShutdownTimeout, DefaultShutdownTimeout)
	p.setResilienceDefaults()
	setDuration(&p.BodyReadTimeout, DefaultBodyReadTimeout)
	setDuration(&p.StreamIdleTimeout, DefaultStreamIdleTimeout)
	if p.MaxConcurrentRequests == 0 {
		p.MaxConcurrentRequests = DefaultMaxConcurrentRequests
	}
	for i := range c.Pools {
		c.Pools[i].setDefaults(c.Listen)
	}
}

func (s *Store) setDefaults() {
	if s.Backend == "" {
		s.Backend = StoreMemory
	}
	if s.Memory.MaxEntries == 0 {
		s.Memory.MaxEntries = DefaultMaxEntries
	}
	if r := s.Redis; r != nil {
		setDuration(&r.Timeout, DefaultRedisTimeout)
		if r.KeyPrefix == "" {
			r.KeyPrefix = DefaultRedisKeyPrefix
		}
	}
	if g := s.Gossip; g != nil {
		if g.Bind == "" {
			g.Bind = DefaultGossipBind
		}
		if g.Discovery == "" {
			g.Discovery = PeersStatic
		}
		if g.MaxEntries == 0 {
			g.MaxEntries = DefaultMaxEntries
		}
	}
	// A store backend chosen without its block gets the block's defaults.
	if s.Backend == StoreRedis && s.Redis == nil {
		s.Redis = &RedisStore{}
		s.setDefaults()
	}
	if s.Backend == StoreGossip && s.Gossip == nil {
		s.Gossip = &GossipStore{}
		s.setDefaults()
	}
}

func (p *Pool) setDefaults(listen string) {
	if p.Listen == "" {
		p.Listen = listen
	}
	// Only an unset TTL gets the default: an explicit 0 stays 0, and
	// Validate refuses it.
	if s := p.SessionSticky; s != nil && s.SessionAffinitySeconds == nil {
		s.SessionAffinitySeconds = Seconds(DefaultSessionAffinitySeconds)
	}
	// A ModelServer's pool is a PD pool when the object says so (pdGroup).
	if (p.Backends.IsPD() || p.Backends.ModelServer != nil) && p.Backends.PrefillHeader == "" {
		p.Backends.PrefillHeader = DefaultPrefillHeader
	}
	a := &p.Affinity
	if a.Mode == "" {
		a.Mode = AffinityHard
	}
	if a.MaxWaiting == 0 {
		a.MaxWaiting = DefaultMaxWaiting
	}
	if a.LoadMargin == 0 {
		a.LoadMargin = DefaultLoadMargin
	}
	// The cool-down is a soft pool's only: a hard pool's config (which the
	// injector renders into pods with its defaults) stays as it was. A soft
	// pool without a loadMetrics block scrapes with the defaults (Pool.Load).
	if a.Mode == AffinitySoft {
		setDuration(&a.Cooldown, DefaultAffinityCooldown)
	}
	if p.LoadMetrics != nil {
		p.LoadMetrics.setDefaults()
	}
	if p.Backends.HealthCheck != nil {
		p.Backends.HealthCheck.setDefaults()
	}
	if t := p.SessionToken; t != nil {
		if t.Header == "" {
			t.Header = DefaultSessionTokenHeader
		}
		if t.PrefillHeader == "" {
			t.PrefillHeader = DefaultPrefillTokenHeader
		}
		if c := t.Cookie; c != nil {
			if c.Name == "" {
				c.Name = DefaultTokenCookieName
			}
			if c.SameSite == "" {
				c.SameSite = SameSiteLax
			}
		}
	}
}

func setDuration(d *Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func (l *LoadMetrics) setDefaults() {
	setDuration(&l.Interval, DefaultLoadInterval)
	setDuration(&l.Timeout, DefaultLoadTimeout)
	if l.Path == "" {
		l.Path = DefaultLoadPath
	}
	if l.Waiting == nil {
		l.Waiting = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	}
	if l.Running == nil {
		l.Running = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	}
	if l.KVUsage == nil {
		l.KVUsage = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
	}
}
