package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherproxy/tether/sidecar/jsonscan"
)

// FieldError is one validation problem: the field's path in the document
// and the rule it breaks.
type FieldError struct {
	Field string
	Rule  string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Rule }

// errs collects FieldErrors in document order.
type errs []error

func (e *errs) add(field, format string, a ...any) {
	*e = append(*e, &FieldError{Field: field, Rule: fmt.Sprintf(format, a...)})
}

// Validate checks every rule of the schema and returns all problems at
// once, each a *FieldError, joined with errors.Join. Call SetDefaults first.
func (c *Config) Validate() error {
	var e errs
	checkHostPort(&e, "listen", c.Listen)
	checkHostPort(&e, "admin", c.Admin)
	if c.Debug != "" {
		checkHostPort(&e, "debug", c.Debug)
		if !IsLoopback(c.Debug) {
			e.add("debug", "must be a loopback address (127.0.0.1, ::1 or localhost): /debug/* reveals and changes session bindings, got %q", c.Debug)
		}
		if c.Debug == c.Admin {
			e.add("debug", "must differ from admin (%s)", c.Admin)
		}
	}
	c.Store.validate(&e)
	if c.JWT != nil {
		c.JWT.validate(&e)
	}
	c.Proxy.validate(&e)
	if len(c.Pools) == 0 {
		e.add("pools", "at least one pool is required")
	}
	names := map[string]int{}
	for i := range c.Pools {
		p := &c.Pools[i]
		f := fmt.Sprintf("pools[%d]", i)
		p.validate(&e, f, c.JWT != nil)
		p.validateResilience(&e, f, c)
		if j, dup := names[p.Name]; dup && p.Name != "" {
			e.add(f+".name", "duplicate pool name %q (also pools[%d])", p.Name, j)
		}
		names[p.Name] = i
	}
	c.validateSharedListeners(&e)
	return errors.Join(e...)
}

// validateSharedListeners: pools on one listener are told apart by the
// body's "model", so each needs models and no model may be claimed twice.
func (c *Config) validateSharedListeners(e *errs) {
	for _, l := range c.Listeners() {
		if len(l.Pools) < 2 {
			continue
		}
		owner := map[string]int{}
		for _, i := range l.Pools {
			f := fmt.Sprintf("pools[%d].models", i)
			if c.Pools[i].Backends.ModelServer != nil {
				continue // its model is the ModelServer's spec.model, known at run time
			}
			if len(c.Pools[i].Models) == 0 {
				e.add(f, "required when several pools share listen %s", l.Addr)
			}
			for _, m := range c.Pools[i].Models {
				if j, dup := owner[m]; dup && j != i {
					e.add(f, "model %q is also served by pools[%d] on listen %s", m, j, l.Addr)
				}
				owner[m] = i
			}
		}
	}
}

func (s *Store) validate(e *errs) {
	switch s.Backend {
	case StoreMemory, StoreGossip, StoreRedis:
	default:
		e.add("store.backend", "unknown backend %q (want memory, gossip or redis)", s.Backend)
	}
	if s.Memory.MaxEntries < 1 {
		e.add("store.memory.maxEntries", "must be at least 1, got %d", s.Memory.MaxEntries)
	}
	if s.Backend == StoreRedis && s.Redis != nil {
		s.Redis.validate(e)
	}
	if s.Backend == StoreGossip && s.Gossip != nil {
		s.Gossip.validate(e)
	}
}

func (r *RedisStore) validate(e *errs) {
	const f = "store.redis"
	switch {
	case r.Address == "" && len(r.Addresses) == 0:
		e.add(f+".address", "required (or addresses for Cluster and Sentinel)")
	case r.Address != "" && len(r.Addresses) > 0:
		e.add(f+".address", "set address or addresses, not both")
	}
	if r.Address != "" {
		checkHostPort(e, f+".address", r.Address)
	}
	for i, a := range r.Addresses {
		checkHostPort(e, fmt.Sprintf("%s.addresses[%d]", f, i), a)
	}
	if r.CAFile != "" && !r.TLS {
		e.add(f+".caFile", "needs tls: true (the CA verifies Redis's TLS certificate)")
	}
	if r.DB < 0 {
		e.add(f+".db", "must be 0 or more, got %d", r.DB)
	}
	if r.DB != 0 && len(r.Addresses) > 0 && r.MasterName == "" {
		e.add(f+".db", "Redis Cluster has only db 0, got %d", r.DB)
	}
	if r.Timeout.Duration <= 0 {
		e.add(f+".timeout", "must be positive, got %s", r.Timeout)
	}
	if r.KeyPrefix == "" || strings.ContainsAny(r.KeyPrefix, " \t\r\n{}") {
		e.add(f+".keyPrefix", "must be non-empty without spaces or braces, got %q", r.KeyPrefix)
	}
}

func (g *GossipStore) validate(e *errs) {
	const f = "store.gossip"
	checkHostPort(e, f+".bind", g.Bind)
	if g.Advertise != "" && net.ParseIP(g.Advertise) == nil {
		if _, _, err := net.SplitHostPort(g.Advertise); err != nil {
			e.add(f+".advertise", "must be an IP address or IP:port, got %q", g.Advertise)
		}
	}
	switch g.Discovery {
	case PeersStatic:
		for i, j := range g.Join {
			checkHostPort(e, fmt.Sprintf("%s.join[%d]", f, i), j)
		}
	case PeersKubernetes:
		if g.PeerSelector == "" {
			e.add(f+".peerSelector", "required when discovery is kubernetes")
		} else if _, err := labels.Parse(g.PeerSelector); err != nil {
			e.add(f+".peerSelector", "invalid label selector: %v", err)
		}
	case PeersDNS:
		if g.DNSName == "" {
			e.add(f+".dnsName", "required when discovery is dns")
		}
	default:
		e.add(f+".discovery", "unknown discovery %q (want static, kubernetes or dns)", g.Discovery)
	}
	if g.MaxEntries < 1 {
		e.add(f+".maxEntries", "must be at least 1, got %d", g.MaxEntries)
	}
	switch {
	case g.SecretKeyFile == "" && !g.Insecure:
		e.add(f+".secretKeyFile", "required: gossip is encrypted and authenticated with a shared key "+
			"(a file holding 16, 24 or 32 bytes, raw or base64: openssl rand -base64 32 > gossip.key); "+
			"set %s.insecure: true to run a plaintext ring that anyone on the network can write to", f)
	case g.SecretKeyFile != "" && g.Insecure:
		e.add(f+".insecure", "must not be true with secretKeyFile (the key makes the ring secure)")
	}
}

// JWTAlgorithms are the signing algorithms a configuration may allow.
// "none" is deliberately absent: it can never be allowed.
var JWTAlgorithms = map[string]bool{
	"HS256": true, "HS384": true, "HS512": true,
	"RS256": true, "RS384": true, "RS512": true,
	"PS256": true, "PS384": true, "PS512": true,
	"ES256": true, "ES384": true, "ES512": true,
	"EdDSA": true,
}

func (j *JWT) validate(e *errs) {
	if len(j.Algorithms) == 0 {
		e.add("jwt.algorithms", "at least one algorithm is required")
	}
	var hmac, public bool
	for i, a := range j.Algorithms {
		if !JWTAlgorithms[a] {
			e.add(fmt.Sprintf("jwt.algorithms[%d]", i), "unsupported algorithm %q (want HS256/384/512, RS256/384/512, PS256/384/512, ES256/384/512 or EdDSA)", a)
			continue
		}
		if strings.HasPrefix(a, "HS") {
			hmac = true
		} else {
			public = true
		}
	}
	if hmac && j.HMACSecretFile == "" {
		e.add("jwt.hmacSecretFile", "required by the HMAC algorithms in jwt.algorithms")
	}
	if public && len(j.PublicKeyFiles) == 0 && j.JWKSFile == "" {
		e.add("jwt.publicKeyFiles", "publicKeyFiles or jwksFile is required by the public-key algorithms in jwt.algorithms")
	}
}

func (p *Proxy) validate(e *errs) {
	if p.MaxRequestBodyBytes < 1 {
		e.add("proxy.maxRequestBodyBytes", "must be at least 1, got %d", p.MaxRequestBodyBytes)
	}
	if p.MaxRequestHeaderBytes < 1024 {
		e.add("proxy.maxRequestHeaderBytes", "must be at least 1024, got %d", p.MaxRequestHeaderBytes)
	}
	for _, d := range []struct {
		f string
		v Duration
	}{{"dialTimeout", p.DialTimeout}, {"shutdownTimeout", p.ShutdownTimeout}, {"bodyReadTimeout", p.BodyReadTimeout},
		{"streamIdleTimeout", p.StreamIdleTimeout}} {
		if d.v.Duration <= 0 {
			e.add("proxy."+d.f, "must be positive, got %s", d.v)
		}
	}
	p.validateResilience(e)
	if p.MaxConcurrentRequests < 1 {
		e.add("proxy.maxConcurrentRequests", "must be at least 1, got %d", p.MaxConcurrentRequests)
	}
}

func (p *Pool) validate(e *errs, f string, haveJWT bool) {
	if p.Name == "" {
		e.add(f+".name", "required")
	}
	checkHostPort(e, f+".listen", p.Listen)
	switch {
	case p.Backends.ModelServer != nil:
		if p.SessionSticky != nil {
			e.add(f+".sessionSticky", "must not be set with backends.modelServer (the ModelServer's spec.trafficPolicy.sessionSticky is the pool's)")
		}
		if len(p.Models) > 0 {
			e.add(f+".models", "must not be set with backends.modelServer (the ModelServer's spec.model is the pool's)")
		}
	case p.SessionSticky != nil:
		p.SessionSticky.validate(e, f+".sessionSticky", haveJWT, p.SessionToken != nil)
	case p.SessionToken != nil:
		e.add(f+".sessionToken", "needs sessionSticky (a pool without it is balanced and binds nothing, so there is no session to carry)")
	}
	p.Backends.validate(e, f+".backends")
	switch p.Affinity.Mode {
	case AffinityHard, AffinitySoft:
	default:
		e.add(f+".affinity.mode", "unknown mode %q (want hard or soft)", p.Affinity.Mode)
	}
	if p.Affinity.MaxWaiting < 0 {
		e.add(f+".affinity.maxWaiting", "must be 0 or more, got %d", p.Affinity.MaxWaiting)
	}
	if p.Affinity.LoadMargin < 0 {
		e.add(f+".affinity.loadMargin", "must be 0 or more, got %d", p.Affinity.LoadMargin)
	}
	if p.Affinity.Cooldown.Duration < 0 {
		e.add(f+".affinity.cooldown", "must not be negative, got %s", p.Affinity.Cooldown)
	}
	switch p.Affinity.Placement {
	case "", PlacementHash, PlacementLeastLoaded:
	default:
		e.add(f+".affinity.placement", "unknown placement %q (want hash or leastLoaded)", p.Affinity.Placement)
	}
	for _, c := range []struct {
		name string
		eps  *float64
	}{{"hashEpsilon", p.Affinity.HashEpsilon}, {"bindingEpsilon", p.Affinity.BindingEpsilon}, {"workEpsilon", p.Affinity.WorkEpsilon}} {
		if c.eps != nil && !(*c.eps >= 0 && *c.eps <= 10) {
			e.add(f+".affinity."+c.name, "must be between 0 and 10, got %v", *c.eps)
		}
	}
	switch p.Affinity.Policy {
	case "", PolicyThreshold, PolicyCost:
	default:
		e.add(f+".affinity.policy", "unknown policy %q (want threshold or cost)", p.Affinity.Policy)
	}
	if p.Affinity.Policy != "" && p.Affinity.Mode != AffinitySoft {
		e.add(f+".affinity.policy", "applies to soft affinity only (mode is %q; hard affinity never moves a selectable pin)", p.Affinity.Mode)
	}
	if m := p.Affinity.CostMargin; m != nil && !(*m >= 0 && *m <= 10) {
		e.add(f+".affinity.costMargin", "must be between 0 and 10, got %v", *m)
	}
	if p.Affinity.PrefillTokensPerSecond < 0 {
		e.add(f+".affinity.prefillTokensPerSecond", "must be 0 (learned) or more, got %d", p.Affinity.PrefillTokensPerSecond)
	}
	if p.Affinity.Mode == AffinitySoft && p.Load() == nil {
		e.add(f+".affinity.mode", "soft affinity needs loadMetrics (it breaks pins on the scraped queue length)")
	}
	if p.LoadMetrics != nil {
		p.LoadMetrics.validate(e, f+".loadMetrics")
	}
	if p.SessionToken != nil {
		p.SessionToken.validate(e, f+".sessionToken")
	}
}

// Validate checks a sessionSticky block that reaches the sidecar at run
// time (a ModelServer's), with the rules of the config's own: field is
// its path in error messages, haveJWT and haveTokens say whether the
// pool can verify JWTClaim and Token sources. The error joins FieldErrors.
func (s *SessionSticky) Validate(field string, haveJWT, haveTokens bool) error {
	var e errs
	s.validate(&e, field, haveJWT, haveTokens)
	return errors.Join(e...)
}

func (s *SessionSticky) validate(e *errs, f string, haveJWT, haveTokens bool) {
	if n := s.SessionAffinitySeconds; n != nil && *n < 1 {
		e.add(f+".sessionAffinitySeconds", "must be at least 1 when set, got %d (leave it out for the default %d)", *n, DefaultSessionAffinitySeconds)
	}
	ValidateSources(e.adder(f+".sources"), s.Sources, haveJWT)
	tokens, others := 0, 0
	for i, src := range s.Sources {
		if src.Type != SourceToken {
			others++
			continue
		}
		tokens++
		if !haveTokens {
			e.add(fmt.Sprintf("%s.sources[%d].type", f, i), "a Token source needs the pool's sessionToken block (keys to verify tokens)")
		}
	}
	if tokens > 0 && others == 0 {
		e.add(f+".sources", "a Token source needs another source that names the session (Header, Query, Cookie or JWTClaim): "+
			"tokens are issued only to requests with a session key, so a session's first turn needs one")
	}
}

func (l *LoadMetrics) validate(e *errs, f string) {
	if l.Interval.Duration <= 0 {
		e.add(f+".interval", "must be positive, got %s", l.Interval)
	}
	if l.Timeout.Duration <= 0 || l.Timeout.Duration > l.Interval.Duration {
		e.add(f+".timeout", "must be positive and at most interval (%s), got %s", l.Interval, l.Timeout)
	}
	if !strings.HasPrefix(l.Path, "/") {
		e.add(f+".path", "must start with /, got %q", l.Path)
	}
	for _, n := range []struct {
		f     string
		names []string
	}{{"waiting", l.Waiting}, {"running", l.Running}, {"kvUsage", l.KVUsage}} {
		for i, name := range n.names {
			if name == "" || strings.ContainsAny(name, " \t\r\n{}\"") {
				e.add(fmt.Sprintf("%s.%s[%d]", f, n.f, i), "%q is not a metric name", name)
			}
		}
	}
}

func (t *SessionToken) validate(e *errs, f string) {
	if !httpguts.ValidHeaderFieldName(t.Header) {
		e.add(f+".header", "%q is not a valid HTTP header name", t.Header)
	}
	if !httpguts.ValidHeaderFieldName(t.PrefillHeader) {
		e.add(f+".prefillHeader", "%q is not a valid HTTP header name", t.PrefillHeader)
	}
	if t.KeyFile == "" {
		e.add(f+".keyFile", "required (the HMAC key that signs tokens)")
	}
	if c := t.Cookie; c != nil {
		if c.Name == "" || strings.ContainsFunc(c.Name, func(r rune) bool { return !httpguts.IsTokenRune(r) }) {
			e.add(f+".cookie.name", "%q is not a valid cookie name", c.Name)
		}
		switch c.SameSite {
		case SameSiteLax, SameSiteStrict:
		case SameSiteNone:
			if !c.Secure {
				e.add(f+".cookie.sameSite", "None needs secure: true (browsers drop a SameSite=None cookie that is not Secure)")
			}
		default:
			e.add(f+".cookie.sameSite", "unknown value %q (want Lax, Strict or None)", c.SameSite)
		}
	}
}

// adder returns a function that records errors under a field prefix.
func (e *errs) adder(prefix string) func(suffix, format string, a ...any) {
	return func(suffix, format string, a ...any) { e.add(prefix+suffix, format, a...) }
}

// ValidateSources checks a sources list. It reports through add, whose
// first argument is a suffix of the list's field ("" for the list itself,
// "[2].type" for an entry), so the injector can name its annotation instead.
func ValidateSources(add func(suffix, format string, a ...any), sources []Source, haveJWT bool) {
	switch {
	case len(sources) == 0:
		add("", "at least one source is required")
	case len(sources) > MaxSources:
		add("", "at most %d sources are allowed, got %d", MaxSources, len(sources))
	}
	for i, s := range sources {
		at := fmt.Sprintf("[%d]", i)
		switch s.Type {
		case SourceHeader, SourceQuery, SourceCookie, SourceJWTClaim, SourceToken, SourceBody:
		default:
			add(at+".type", "unknown source type %q (want Header, Query, Cookie, JWTClaim, Token or Body)", s.Type)
			continue
		}
		if s.Name == "" {
			add(at+".name", "required for a %s source", s.Type)
			continue
		}
		switch s.Type {
		case SourceHeader, SourceToken:
			if !httpguts.ValidHeaderFieldName(s.Name) {
				add(at+".name", "%q is not a valid HTTP header name", s.Name)
			}
		case SourceCookie:
			if strings.ContainsAny(s.Name, " \t;,=\"") {
				add(at+".name", "%q is not a valid cookie name", s.Name)
			}
		case SourceBody:
			if err := jsonscan.ValidatePath(s.Name); err != nil {
				add(at+".name", "%v", err)
			}
		case SourceJWTClaim:
			if !haveJWT {
				add(at+".type", "a JWTClaim source needs the jwt block (keys and algorithms to verify tokens)")
			}
		}
	}
}

func (b *Backends) validate(e *errs, f string) {
	kinds := 0
	if len(b.Static) > 0 {
		kinds++
	}
	if b.Kubernetes != nil {
		kinds++
	}
	if b.IsPD() {
		kinds++
	}
	if b.ModelServer != nil {
		kinds++
	}
	if kinds != 1 {
		e.add(f, "exactly one of static, kubernetes, prefill+decode or modelServer is required")
	}
	if m := b.ModelServer; m != nil {
		if errs := validation.IsDNS1123Subdomain(m.Name); len(errs) > 0 {
			e.add(f+".modelServer.name", "must be the name of a ModelServer, got %q", m.Name)
		}
		if errs := validation.IsDNS1123Label(m.Namespace); m.Namespace != "" && len(errs) > 0 {
			e.add(f+".modelServer.namespace", "must be a namespace name, got %q", m.Namespace)
		}
		if b.GroupLabel != "" {
			e.add(f+".groupLabel", "must not be set with modelServer (its spec.workloadSelector.pdGroup.groupKey is the pool's)")
		}
		if !httpguts.ValidHeaderFieldName(b.PrefillHeader) {
			e.add(f+".prefillHeader", "%q is not a valid HTTP header name", b.PrefillHeader)
		}
	}
	seen := map[string]bool{}
	for i, a := range b.Static {
		checkHostPort(e, fmt.Sprintf("%s.static[%d]", f, i), a)
		if h, _, err := net.SplitHostPort(a); err == nil && len(h) > maxHostLen {
			e.add(fmt.Sprintf("%s.static[%d]", f, i), "host is %d bytes, a DNS name is at most %d", len(h), maxHostLen)
		}
		if seen[a] {
			e.add(fmt.Sprintf("%s.static[%d]", f, i), "duplicate backend %q", a)
		}
		seen[a] = true
	}
	if b.Kubernetes != nil {
		b.Kubernetes.validate(e, f+".kubernetes")
	}
	if b.IsPD() {
		if b.Prefill == nil || b.Decode == nil {
			e.add(f, "a PD pool needs both prefill and decode")
		}
		if b.Prefill != nil {
			b.Prefill.validate(e, f+".prefill")
		}
		if b.Decode != nil {
			b.Decode.validate(e, f+".decode")
		}
		if !httpguts.ValidHeaderFieldName(b.PrefillHeader) {
			e.add(f+".prefillHeader", "%q is not a valid HTTP header name", b.PrefillHeader)
		}
	}
}

func (k *KubeSelector) validate(e *errs, f string) {
	if k.Selector == "" {
		e.add(f+".selector", "required")
	} else if _, err := labels.Parse(k.Selector); err != nil {
		e.add(f+".selector", "invalid label selector: %v", err)
	}
	switch {
	case k.Port == 0 && k.PortName == "":
		e.add(f+".port", "port or portName is required")
	case k.Port != 0 && k.PortName != "":
		e.add(f+".port", "set port or portName, not both")
	case k.Port < 0 || k.Port > 65535:
		e.add(f+".port", "must be 1..65535, got %d", k.Port)
	}
}

// IsLoopback reports whether host:port names a loopback address
// (127.0.0.0/8, ::1 or localhost), which only the pod itself can reach.
func IsLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxHostLen is the longest DNS name; it keeps a static backend's ID
// within the length stores accept from peers (discovery.MaxIDLen).
const maxHostLen = 253

func checkHostPort(e *errs, field, v string) {
	if v == "" {
		e.add(field, "required (host:port)")
		return
	}
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		e.add(field, "must be host:port, got %q", v)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		e.add(field, "port must be 0..65535, got %q", port)
	}
}
