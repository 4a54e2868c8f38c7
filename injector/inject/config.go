package inject

import (
	"cmp"
	"errors"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tetherproxy/tether/sidecar/config"
)

// plan is everything the pod's annotations and the injector's defaults
// decide: the store (for ports and Secret mounts), the Secrets to mount,
// and either a ConfigMap name or a rendered config.
type plan struct {
	store               config.StoreBackend
	configMap           string
	cfg                 *config.Config // nil with a ConfigMap
	redisPasswordSecret string
	redisCASecret       string
	gossipKeySecret     string
	jwtSecret           string
	tokenSecret         string
	storeKeySecret      string
	listenPort          int
	adminPort           int
	gossipPort          int
	debugPort           int
	// The sidecar container's knobs: requests and limits, the Go memory
	// limit derived from the memory limit (0: none), the log level ("":
	// the sidecar's default) and whether to add Prometheus' scrape
	// annotations for its admin port.
	resources  corev1.ResourceRequirements
	goMemLimit int64
	logLevel   string
	scrape     bool
	// warnings for the user (kubectl prints them).
	warnings []string
}

// buildPlan applies the cross-key rules and renders the sidecar config,
// validated by the sidecar's own SetDefaults and Validate.
func (inj *Injector) buildPlan(a *Annotations, pod *corev1.Pod, ns string) (*plan, problems) {
	var p problems
	pl := &plan{
		store:       firstNonEmpty(a.Store, inj.opts.Store, config.StoreMemory),
		configMap:   a.ConfigMap,
		jwtSecret:   a.JWTSecret,
		tokenSecret: a.SessionTokenSecret,
		listenPort:  cmp.Or(a.ListenPort, DefaultListenPort),
		adminPort:   cmp.Or(a.AdminPort, AdminPort),
		gossipPort:  cmp.Or(a.GossipPort, GossipPort),
		debugPort:   cmp.Or(a.DebugPort, DebugPort),
		logLevel:    a.LogLevel,
	}
	pl.resources, p = inj.resources(a)
	pl.goMemLimit = goMemLimit(pl.resources)
	var w string
	if pl.scrape, w, p = inj.prometheusScrape(a, pod, p); w != "" {
		pl.warnings = append(pl.warnings, w)
	}

	// Secrets follow the store: a default Secret for another store is not
	// mounted; an annotated one for another store is a mistake.
	switch pl.store {
	case config.StoreRedis:
		pl.redisPasswordSecret = firstNonEmpty(a.RedisPasswordSecret, inj.opts.RedisPasswordSecret)
		pl.redisCASecret = a.RedisCASecret
	case config.StoreGossip:
		pl.gossipKeySecret = firstNonEmpty(a.GossipKeySecret, inj.opts.GossipKeySecret)
	}
	pl.storeKeySecret = a.StoreKeySecret
	for _, c := range []struct {
		key   string
		store config.StoreBackend
	}{
		{AnnotationRedisAddress, config.StoreRedis},
		{AnnotationRedisPasswordSecret, config.StoreRedis},
		{AnnotationRedisUsername, config.StoreRedis},
		{AnnotationRedisTLS, config.StoreRedis},
		{AnnotationRedisCASecret, config.StoreRedis},
		{AnnotationRedisRequireAtStartup, config.StoreRedis},
		{AnnotationGossipKeySecret, config.StoreGossip},
		{AnnotationGossipPort, config.StoreGossip},
		{AnnotationGossipRequireAtStartup, config.StoreGossip},
	} {
		if a.Has(c.key) && pl.store != c.store {
			p.add(c.key, "applies only with %s: %s (the store is %q)", AnnotationStore, c.store, pl.store)
		}
	}
	for _, k := range []string{AnnotationJWTAlgorithms, AnnotationJWTIssuer, AnnotationJWTAudience, AnnotationJWTRequireExp} {
		if a.Has(k) && !a.Has(AnnotationJWTSecret) {
			p.add(k, "needs %s (the Secret with the keys that verify tokens)", AnnotationJWTSecret)
		}
	}

	if a.Has(AnnotationConfig) {
		for _, k := range poolKeys {
			if a.Has(k) {
				p.add(k, "cannot be combined with %s (its ConfigMap holds the whole sidecar config)", AnnotationConfig)
			}
		}
		return pl, p
	}

	cfg, cp := inj.renderConfig(a, pod, ns, pl)
	p = append(p, cp...)
	if len(p) > 0 {
		return pl, p
	}
	// The stores hold no more bindings than the memory limit has room for.
	cfg.Store.DefaultMaxEntries(config.MaxEntriesFor(pl.goMemLimit))
	// The sidecar's own rules, with its own defaults, are the last word.
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		p = append(p, fieldProblems(err)...)
		return pl, p
	}
	pl.cfg = cfg
	return pl, p
}

// renderConfig builds the single-pool config the annotations describe.
func (inj *Injector) renderConfig(a *Annotations, pod *corev1.Pod, ns string, pl *plan) (*config.Config, problems) {
	var p problems
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(pl.listenPort))
	cfg := &config.Config{
		Listen: listen,
		// The kubelet's probes reach the admin listener from outside the
		// pod; /debug/* is on loopback only, for kubectl exec or
		// port-forward.
		Admin: net.JoinHostPort("0.0.0.0", strconv.Itoa(pl.adminPort)),
		Debug: net.JoinHostPort("127.0.0.1", strconv.Itoa(pl.debugPort)),
		Store: config.Store{Backend: pl.store},
	}
	// Store keys are an HMAC with a secret the replicas share: the
	// annotated Secret, or else a gossip ring's own key.
	switch {
	case pl.storeKeySecret != "":
		cfg.Store.KeySecretFile = StoreKeyDir + "/" + StoreKeyKey
	case pl.store == config.StoreGossip && pl.gossipKeySecret != "":
		cfg.Store.KeySecretFile = GossipKeyDir + "/" + GossipKeyKey
	}

	pool := config.Pool{Listen: listen, Affinity: config.Affinity{Mode: a.Affinity, Policy: a.AffinityPolicy}}
	if pool.Name = PoolName(pod, ns, a.Pool); pool.Name == "" {
		p.add(AnnotationPool, "required: the pod has no app.kubernetes.io/name or app label and no name to derive the pool name from")
	}

	// Sessions. Without tether.dev/sources the pool is balanced and binds
	// nothing (Kthena's pool without sessionSticky); a ModelServer's pool
	// takes its sessions from the object.
	switch {
	case a.Has(AnnotationModelServer):
		for _, k := range []string{AnnotationSources, AnnotationTTL} {
			if a.Has(k) {
				p.add(k, "cannot be combined with %s (the ModelServer's spec.trafficPolicy.sessionSticky is the pool's)", AnnotationModelServer)
			}
		}
	case a.Has(AnnotationSources):
		pool.SessionSticky = &config.SessionSticky{Sources: a.Sources}
		if a.TTL > 0 {
			pool.SessionSticky.SessionAffinitySeconds = config.Seconds(int(a.TTL.Seconds()))
		}
	case a.Has(AnnotationTTL):
		p.add(AnnotationTTL, "applies only with %s (a pool without sources binds nothing)", AnnotationSources)
	}
	jwtClaim := false
	for _, s := range a.Sources {
		jwtClaim = jwtClaim || s.Type == config.SourceJWTClaim
	}
	if jwtClaim && a.JWTSecret == "" {
		p.add(AnnotationSources, "a JWTClaim source needs %s (the Secret with the keys that verify tokens)", AnnotationJWTSecret)
	}
	if a.JWTSecret != "" {
		cfg.JWT = jwtConfig(a)
	}
	pool.SessionToken, p = sessionToken(a, p)

	// Backends.
	pool.Backends, p = backends(a, ns, p)

	// Store.
	switch pl.store {
	case config.StoreRedis:
		addrs := a.RedisAddresses
		if len(addrs) == 0 && inj.opts.RedisAddress != "" {
			addrs = strings.Split(inj.opts.RedisAddress, ",")
		}
		r := &config.RedisStore{}
		switch len(addrs) {
		case 0:
			p.add(AnnotationRedisAddress, "required by %s: redis (no default Redis address is configured in the chart)", AnnotationStore)
		case 1:
			r.Address = addrs[0]
		default:
			r.Addresses = addrs
		}
		if pl.redisPasswordSecret != "" {
			r.PasswordFile = RedisPasswordDir + "/" + RedisPasswordKey
		}
		r.Username = cmp.Or(a.RedisUsername, inj.opts.RedisUsername)
		r.TLS = inj.opts.RedisTLS
		if a.RedisTLS != nil {
			r.TLS = *a.RedisTLS
		}
		if pl.redisCASecret != "" && a.RedisTLS != nil && !*a.RedisTLS {
			p.add(AnnotationRedisCASecret, "needs TLS to Redis, but %s is \"false\"", AnnotationRedisTLS)
		}
		if pl.redisCASecret == "" && r.TLS {
			// The chart's CA serves pods that have TLS on.
			pl.redisCASecret = inj.opts.RedisCASecret
		}
		if pl.redisCASecret != "" {
			r.TLS, r.CAFile = true, RedisCADir+"/"+RedisCAKey
		}
		r.RequireAtStartup = a.RedisRequireAtStartup
		cfg.Store.Redis = r
	case config.StoreGossip:
		g := &config.GossipStore{
			Bind:         net.JoinHostPort("0.0.0.0", strconv.Itoa(pl.gossipPort)),
			Discovery:    config.PeersKubernetes,
			PeerSelector: PeerSelector(pod),
			// Readiness waits for the ring's state unless the pod says not to.
			RequireAtStartup: a.GossipRequireAtStartup,
		}
		if g.PeerSelector == "" {
			p.add(AnnotationStore, "gossip finds peers by the router pod's labels, and the pod has none that all replicas share")
		}
		if pl.gossipKeySecret == "" {
			p.add(AnnotationGossipKeySecret, "required by %s: gossip (the chart's sidecar.gossip.keySecret is empty): "+
				"a Secret whose key %q encrypts and authenticates the ring", AnnotationStore, GossipKeyKey)
		} else {
			g.SecretKeyFile = GossipKeyDir + "/" + GossipKeyKey
		}
		cfg.Store.Gossip = g
	}

	cfg.Pools = []config.Pool{pool}
	return cfg, p
}

func backends(a *Annotations, ns string, p problems) (config.Backends, problems) {
	var b config.Backends
	sel := func(s string) *config.KubeSelector {
		return &config.KubeSelector{Selector: s, Port: a.BackendPort, PortName: a.BackendPortName}
	}
	pd := a.Has(AnnotationPrefillSelector) || a.Has(AnnotationDecodeSelector)
	if a.Has(AnnotationModelServer) {
		for _, k := range []string{AnnotationBackendSelector, AnnotationBackendPort, AnnotationPrefillSelector, AnnotationDecodeSelector, AnnotationPDGroupLabel} {
			if a.Has(k) {
				p.add(k, "cannot be combined with %s (the ModelServer's workloadSelector and workloadPort are the pool's)", AnnotationModelServer)
			}
		}
		if a.ModelServer != "" {
			b.ModelServer = &config.ModelServerRef{Namespace: ns, Name: a.ModelServer}
		}
		return b, p
	}
	switch {
	case a.Has(AnnotationBackendSelector) && pd:
		p.add(AnnotationBackendSelector, "set %s, or %s and %s for a PD pool, not both",
			AnnotationBackendSelector, AnnotationPrefillSelector, AnnotationDecodeSelector)
	case pd:
		if !a.Has(AnnotationPrefillSelector) {
			p.add(AnnotationPrefillSelector, "required with %s (a PD pool needs both)", AnnotationDecodeSelector)
		}
		if !a.Has(AnnotationDecodeSelector) {
			p.add(AnnotationDecodeSelector, "required with %s (a PD pool needs both)", AnnotationPrefillSelector)
		}
		if a.PrefillSelector != "" && a.DecodeSelector != "" {
			b.Prefill, b.Decode = sel(a.PrefillSelector), sel(a.DecodeSelector)
			b.GroupLabel = a.PDGroupLabel
		}
	case a.Has(AnnotationBackendSelector):
		if a.BackendSelector != "" {
			b.Kubernetes = sel(a.BackendSelector)
		}
	default:
		p.add(AnnotationBackendSelector, "required: the label selector of the model-server pods (or %s and %s for a PD pool, or %s)",
			AnnotationPrefillSelector, AnnotationDecodeSelector, AnnotationModelServer)
	}
	if a.Has(AnnotationPDGroupLabel) && !pd {
		p.add(AnnotationPDGroupLabel, "applies only with %s and %s", AnnotationPrefillSelector, AnnotationDecodeSelector)
	}
	if (a.Has(AnnotationBackendSelector) || pd) && !a.Has(AnnotationBackendPort) {
		p.add(AnnotationBackendPort, "required: the model servers' port number or container port name")
	}
	return b, p
}

// sessionToken is the pool's sessionToken block: tokens are written to
// the response header the first Token source reads back, and signed with
// the key "key" of the tether.dev/session-token-secret Secret.
func sessionToken(a *Annotations, p problems) (*config.SessionToken, problems) {
	header := ""
	for _, s := range a.Sources {
		if s.Type == config.SourceToken && header == "" {
			header = s.Name
		}
	}
	switch {
	case header != "" && a.SessionTokenSecret == "":
		p.add(AnnotationSources, "a Token source needs %s (the Secret whose key %q signs and verifies session tokens)",
			AnnotationSessionTokenSecret, SessionTokenKey)
		return nil, p
	case header == "" && a.Has(AnnotationSessionTokenSecret) && a.Has(AnnotationModelServer):
		// The ModelServer's sources may name Token sources, which then
		// read the default header.
		header = config.DefaultSessionTokenHeader
	case header == "" && a.Has(AnnotationSessionTokenSecret):
		p.add(AnnotationSessionTokenSecret, "applies only with a Token source in %s (for example Token:x-session-token,Header:X-Session-ID)",
			AnnotationSources)
		return nil, p
	case header == "":
		return nil, p
	}
	return &config.SessionToken{Header: header, KeyFile: SessionTokenDir + "/" + SessionTokenKey}, p
}

// jwtConfig points the sidecar at the fixed file names in the mounted
// Secret: hmac-secret for HMAC algorithms, public.pem for the others.
func jwtConfig(a *Annotations) *config.JWT {
	j := &config.JWT{Algorithms: a.JWTAlgorithms, Issuer: a.JWTIssuer, Audience: a.JWTAudience,
		RequireExp: a.JWTRequireExp != nil && *a.JWTRequireExp}
	if len(j.Algorithms) == 0 {
		j.Algorithms = []string{"RS256"}
	}
	for _, alg := range j.Algorithms {
		if strings.HasPrefix(alg, "HS") {
			j.HMACSecretFile = JWTDir + "/" + JWTHMACSecretKey
		} else {
			j.PublicKeyFiles = []string{JWTDir + "/" + JWTPublicKeyKey}
		}
	}
	return j
}

// fieldAnnotations maps a config field (by prefix, most specific first)
// to the annotation that set it, so the sidecar's validation errors name
// what the user wrote.
var fieldAnnotations = []struct{ prefix, key string }{
	{"pools[0].name", AnnotationPool},
	{"pools[0].listen", AnnotationListenPort},
	{"pools[0].sessionSticky.sessionAffinitySeconds", AnnotationTTL},
	{"pools[0].sessionSticky.sources", AnnotationSources},
	{"pools[0].backends.kubernetes.selector", AnnotationBackendSelector},
	{"pools[0].backends.prefill.selector", AnnotationPrefillSelector},
	{"pools[0].backends.decode.selector", AnnotationDecodeSelector},
	{"pools[0].backends.groupLabel", AnnotationPDGroupLabel},
	{"pools[0].backends.kubernetes", AnnotationBackendPort},
	{"pools[0].backends.prefill", AnnotationBackendPort},
	{"pools[0].backends.decode", AnnotationBackendPort},
	{"pools[0].backends.modelServer", AnnotationModelServer},
	{"pools[0].backends", AnnotationBackendSelector},
	{"pools[0].affinity.policy", AnnotationAffinityPolicy},
	{"pools[0].affinity", AnnotationAffinity},
	{"pools[0].sessionToken", AnnotationSessionTokenSecret},
	{"store.redis.username", AnnotationRedisUsername},
	{"store.redis.caFile", AnnotationRedisCASecret},
	{"store.redis", AnnotationRedisAddress},
	{"store.gossip.bind", AnnotationGossipPort},
	{"store.gossip.secretKeyFile", AnnotationGossipKeySecret},
	{"store.keySecretFile", AnnotationStoreKeySecret},
	{"store.redis.requireAtStartup", AnnotationRedisRequireAtStartup},
	{"store.gossip.requireAtStartup", AnnotationGossipRequireAtStartup},
	{"debug", AnnotationDebugPort},
	{"store", AnnotationStore},
	{"jwt.algorithms", AnnotationJWTAlgorithms},
	{"jwt", AnnotationJWTSecret},
	{"listen", AnnotationListenPort},
	{"admin", AnnotationAdminPort},
}

// fieldProblems turns config.FieldErrors into AnnotationErrors.
func fieldProblems(err error) problems {
	var p problems
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	for _, e := range list {
		var fe *config.FieldError
		if !errors.As(e, &fe) {
			p.add(Prefix+"*", "rendered sidecar config is invalid: %v", e)
			continue
		}
		key := ""
		for _, m := range fieldAnnotations {
			if fe.Field == m.prefix || strings.HasPrefix(fe.Field, m.prefix+".") || strings.HasPrefix(fe.Field, m.prefix+"[") {
				key = m.key
				break
			}
		}
		if key == "" {
			p.add(Prefix+"*", "rendered sidecar config is invalid: %s: %s", fe.Field, fe.Rule)
			continue
		}
		p.add(key, "%s", fe.Rule)
	}
	return p
}

func firstNonEmpty[S ~string](s ...S) S {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
