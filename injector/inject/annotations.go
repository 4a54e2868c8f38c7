package inject

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherproxy/tether/sidecar/config"
)

// Annotations is the typed form of a pod's tether.dev/ annotations. Each
// field is set only when its annotation is present and valid.
type Annotations struct {
	Inject          *bool
	Pool            string
	Sources         []config.Source
	TTL             time.Duration
	BackendSelector string
	// BackendPort or BackendPortName: a number or a container port's name.
	BackendPort         int
	BackendPortName     string
	PrefillSelector     string
	DecodeSelector      string
	PDGroupLabel        string
	ModelServer         string
	Affinity            config.AffinityMode
	AffinityPolicy      config.AffinityPolicy
	ListenPort          int
	AdminPort           int
	GossipPort          int
	DebugPort           int
	Store               config.StoreBackend
	RedisAddresses      []string
	RedisPasswordSecret string
	RedisUsername       string
	RedisTLS            *bool
	RedisCASecret       string
	GossipKeySecret     string
	StoreKeySecret      string
	// RedisRequireAtStartup and GossipRequireAtStartup: nil unless set.
	RedisRequireAtStartup  *bool
	GossipRequireAtStartup *bool
	JWTSecret              string
	JWTAlgorithms          []string
	JWTIssuer              string
	JWTAudience            string
	JWTRequireExp          *bool
	ConfigMap              string
	LogLevel               string
	// ProxyCPU and ProxyMemory: the request, and the limit when given.
	ProxyCPU           Resource
	ProxyMemory        Resource
	PrometheusScrape   *bool
	SessionTokenSecret string

	// present holds every tether.dev/ key the pod carries (valid or not).
	present map[string]bool
}

// Has reports whether the pod carries the annotation key.
func (a *Annotations) Has(key string) bool { return a.present[key] }

// configures reports whether any annotation other than inject/status is
// present: such a pod asks for a sidecar and is validated strictly.
func (a *Annotations) configures() bool {
	for k := range a.present {
		if k != AnnotationInject && k != AnnotationStatus {
			return true
		}
	}
	return false
}

// Limits on annotation values.
const (
	maxValueBytes = 4096
	maxTTL        = 365 * 24 * time.Hour
	maxTTLText    = "8760h (a year)"
)

// parser validates one annotation's value and stores it in a. It returns
// the rule broken, without the key (the caller prefixes it). Sources is
// the exception: it reports through p itself, as config.ValidateSources can
// find several problems in one value.
type parser func(v string, a *Annotations, p *problems) string

// parsers holds one validator per key; a key absent here is unknown.
var parsers = map[string]parser{
	AnnotationInject:                 parseInject,
	AnnotationPool:                   parsePool,
	AnnotationSources:                parseSources,
	AnnotationTTL:                    parseTTL,
	AnnotationBackendSelector:        selectorInto(func(a *Annotations) *string { return &a.BackendSelector }),
	AnnotationPrefillSelector:        selectorInto(func(a *Annotations) *string { return &a.PrefillSelector }),
	AnnotationDecodeSelector:         selectorInto(func(a *Annotations) *string { return &a.DecodeSelector }),
	AnnotationBackendPort:            parseBackendPort,
	AnnotationPDGroupLabel:           parseGroupLabel,
	AnnotationModelServer:            parseModelServer,
	AnnotationAffinity:               parseAffinity,
	AnnotationAffinityPolicy:         parseAffinityPolicy,
	AnnotationListenPort:             portInto(func(a *Annotations) *int { return &a.ListenPort }),
	AnnotationAdminPort:              portInto(func(a *Annotations) *int { return &a.AdminPort }),
	AnnotationGossipPort:             portInto(func(a *Annotations) *int { return &a.GossipPort }),
	AnnotationDebugPort:              portInto(func(a *Annotations) *int { return &a.DebugPort }),
	AnnotationStore:                  parseStore,
	AnnotationRedisAddress:           parseRedisAddress,
	AnnotationRedisPasswordSecret:    secretInto(func(a *Annotations) *string { return &a.RedisPasswordSecret }),
	AnnotationRedisUsername:          parseRedisUsername,
	AnnotationRedisTLS:               parseRedisTLS,
	AnnotationRedisCASecret:          secretInto(func(a *Annotations) *string { return &a.RedisCASecret }),
	AnnotationGossipKeySecret:        secretInto(func(a *Annotations) *string { return &a.GossipKeySecret }),
	AnnotationStoreKeySecret:         secretInto(func(a *Annotations) *string { return &a.StoreKeySecret }),
	AnnotationRedisRequireAtStartup:  boolInto(func(a *Annotations) **bool { return &a.RedisRequireAtStartup }),
	AnnotationGossipRequireAtStartup: boolInto(func(a *Annotations) **bool { return &a.GossipRequireAtStartup }),
	AnnotationJWTSecret:              secretInto(func(a *Annotations) *string { return &a.JWTSecret }),
	AnnotationJWTAlgorithms:          parseJWTAlgorithms,
	AnnotationJWTIssuer:              textInto(func(a *Annotations) *string { return &a.JWTIssuer }),
	AnnotationJWTAudience:            textInto(func(a *Annotations) *string { return &a.JWTAudience }),
	AnnotationJWTRequireExp:          boolInto(func(a *Annotations) **bool { return &a.JWTRequireExp }),
	AnnotationConfig:                 parseConfigMap,
	AnnotationLogLevel:               parseLogLevel,
	AnnotationProxyCPU:               resourceInto(func(a *Annotations) *Resource { return &a.ProxyCPU }),
	AnnotationProxyMemory:            resourceInto(func(a *Annotations) *Resource { return &a.ProxyMemory }),
	AnnotationPrometheusScrape:       parsePrometheusScrape,
	AnnotationSessionTokenSecret:     secretInto(func(a *Annotations) *string { return &a.SessionTokenSecret }),
	// The status is the injector's own record; Inject reads it separately.
	AnnotationStatus: func(string, *Annotations, *problems) string { return "" },
}

// KnownAnnotations lists every annotation key the injector reads, sorted.
func KnownAnnotations() []string {
	keys := make([]string, 0, len(parsers))
	for k := range parsers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParseAnnotations validates every tether.dev/ annotation on its own (one
// validator per key) and returns the typed values. Rules that involve
// several keys are checked when the sidecar config is built. The error,
// if any, is a *Denial listing every problem in key order.
func ParseAnnotations(ann map[string]string) (*Annotations, error) {
	a := &Annotations{present: map[string]bool{}}
	var p problems
	keys := make([]string, 0, len(ann))
	for k := range ann {
		if strings.HasPrefix(k, Prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		a.present[k] = true
		v := ann[k]
		parse, known := parsers[k]
		switch {
		case !known:
			p.add(k, "unknown annotation (known: %s)", strings.Join(KnownAnnotations(), ", "))
			continue
		case k == AnnotationStatus:
			continue
		case len(v) > maxValueBytes:
			p.add(k, "value is %d bytes, the limit is %d", len(v), maxValueBytes)
			continue
		case strings.IndexFunc(v, unicode.IsControl) >= 0:
			p.add(k, "value contains control characters")
			continue
		}
		if rule := parse(strings.TrimSpace(v), a, &p); rule != "" {
			p.add(k, "%s", rule)
		}
	}
	return a, p.err()
}

func parseInject(v string, a *Annotations, _ *problems) string {
	b, rule := parseBool(v)
	if rule == "" {
		a.Inject = &b
	}
	return rule
}

// parseBool accepts exactly "true" or "false".
func parseBool(v string) (bool, string) {
	if v != "true" && v != "false" {
		return false, fmt.Sprintf(`must be "true" or "false", got %q`, v)
	}
	return v == "true", ""
}

func parsePool(v string, a *Annotations, _ *problems) string {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return fmt.Sprintf("must be a lowercase DNS name (letters, digits, '-' and '.'), got %q", v)
	}
	a.Pool = v
	return ""
}

// parseSources reads "Type:Name,Type:Name" and checks the list with the
// sidecar's own rules (config.ValidateSources), reporting under the
// annotation's name. JWTClaim's need for keys is a cross-key rule checked
// when the config is built, where the message can name tether.dev/jwt-secret.
func parseSources(v string, a *Annotations, p *problems) string {
	var sources []config.Source
	if v != "" {
		for _, entry := range strings.Split(v, ",") {
			entry = strings.TrimSpace(entry)
			typ, name, ok := strings.Cut(entry, ":")
			if !ok {
				return fmt.Sprintf("entry %q must be Type:Name (for example Header:X-Session-ID)", entry)
			}
			sources = append(sources, config.Source{Type: config.SourceType(strings.TrimSpace(typ)), Name: strings.TrimSpace(name)})
		}
	}
	before := len(*p)
	config.ValidateSources(func(_, format string, args ...any) {
		p.add(AnnotationSources, format, args...)
	}, sources, true)
	if len(*p) == before {
		a.Sources = sources
	}
	return ""
}

// parseTTL accepts whole seconds ("300") or a Go duration ("5m").
func parseTTL(v string, a *Annotations, _ *problems) string {
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		switch {
		case n < 1:
			return fmt.Sprintf("must be at least 1s, got %q", v)
		case n > int64(maxTTL/time.Second):
			return fmt.Sprintf("must be at most %s, got %q", maxTTLText, v)
		}
		d = time.Duration(n) * time.Second
	} else {
		pd, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Sprintf("must be seconds or a Go duration such as 300 or 5m, got %q", v)
		}
		d = pd
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("must be at least 1s, got %q", v)
	case d > maxTTL:
		return fmt.Sprintf("must be at most %s, got %q", maxTTLText, v)
	case d%time.Second != 0:
		return fmt.Sprintf("must be whole seconds, got %q", v)
	}
	a.TTL = d
	return ""
}

func selectorInto(field func(*Annotations) *string) parser {
	return func(v string, a *Annotations, _ *problems) string {
		if v == "" {
			return "must not be empty (a label selector such as app=vllm)"
		}
		sel, err := labels.Parse(v)
		if err != nil {
			return fmt.Sprintf("invalid label selector: %v", err)
		}
		if sel.Empty() {
			return fmt.Sprintf("must select something, got %q", v)
		}
		*field(a) = v
		return ""
	}
}

func parseBackendPort(v string, a *Annotations, _ *problems) string {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 || n > 65535 {
			return fmt.Sprintf("must be a port 1..65535 or a port name, got %q", v)
		}
		a.BackendPort = n
		return ""
	}
	if errs := validation.IsValidPortName(v); len(errs) > 0 {
		return fmt.Sprintf("must be a port 1..65535 or a port name, got %q", v)
	}
	a.BackendPortName = v
	return ""
}

func parseGroupLabel(v string, a *Annotations, _ *problems) string {
	if errs := validation.IsQualifiedName(v); len(errs) > 0 {
		return fmt.Sprintf("must be a label key, got %q", v)
	}
	a.PDGroupLabel = v
	return ""
}

// parseModelServer accepts the name of a ModelServer in the pod's
// namespace (the sidecar's RBAC is granted there).
func parseModelServer(v string, a *Annotations, _ *problems) string {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return fmt.Sprintf("must be the name of a ModelServer in the pod's namespace, got %q", v)
	}
	a.ModelServer = v
	return ""
}

func parseAffinity(v string, a *Annotations, _ *problems) string {
	mode := config.AffinityMode(v)
	if mode != config.AffinityHard && mode != config.AffinitySoft {
		return fmt.Sprintf("unknown mode %q (want hard or soft)", v)
	}
	a.Affinity = mode
	return ""
}

func parseAffinityPolicy(v string, a *Annotations, _ *problems) string {
	p := config.AffinityPolicy(v)
	if p != config.PolicyThreshold && p != config.PolicyCost {
		return fmt.Sprintf("unknown policy %q (want threshold or cost)", v)
	}
	a.AffinityPolicy = p
	return ""
}

// portInto reads a port number. Ports are checked against each other and
// against the pod's containers when the pod is known (conflicts).
func portInto(field func(*Annotations) *int) parser {
	return func(v string, a *Annotations, _ *problems) string {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("must be a port 1..65535, got %q", v)
		}
		*field(a) = n
		return ""
	}
}

func parseStore(v string, a *Annotations, _ *problems) string {
	switch b := config.StoreBackend(v); b {
	case config.StoreMemory, config.StoreGossip, config.StoreRedis:
		a.Store = b
		return ""
	}
	return fmt.Sprintf("unknown store %q (want memory, gossip or redis)", v)
}

// parseRedisAddress accepts one host:port, or several (comma-separated)
// for Redis Cluster.
func parseRedisAddress(v string, a *Annotations, _ *problems) string {
	var addrs []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		host, port, err := net.SplitHostPort(s)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("must be host:port (several comma-separated for Redis Cluster), got %q", s)
		}
		if slices.Contains(addrs, s) {
			return fmt.Sprintf("address %q is listed twice", s)
		}
		addrs = append(addrs, s)
	}
	a.RedisAddresses = addrs
	return ""
}

// parseRedisUsername accepts an ACL user name: Redis allows any bytes,
// but one that needs quoting in redis-cli is refused here as a likely typo.
func parseRedisUsername(v string, a *Annotations, _ *problems) string {
	if v == "" || strings.ContainsFunc(v, unicode.IsSpace) || strings.ContainsAny(v, `"'`) {
		return fmt.Sprintf("must be a Redis ACL user name without spaces or quotes, got %q", v)
	}
	a.RedisUsername = v
	return ""
}

func parseRedisTLS(v string, a *Annotations, _ *problems) string {
	b, rule := parseBool(v)
	if rule == "" {
		a.RedisTLS = &b
	}
	return rule
}

// boolInto stores "true" or "false" in an optional field.
func boolInto(field func(*Annotations) **bool) parser {
	return func(v string, a *Annotations, _ *problems) string {
		b, rule := parseBool(v)
		if rule == "" {
			*field(a) = &b
		}
		return rule
	}
}

func secretInto(field func(*Annotations) *string) parser {
	return func(v string, a *Annotations, _ *problems) string {
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return fmt.Sprintf("must be the name of a Secret in the pod's namespace, got %q", v)
		}
		*field(a) = v
		return ""
	}
}

func textInto(field func(*Annotations) *string) parser {
	return func(v string, a *Annotations, _ *problems) string {
		if v == "" {
			return "must not be empty"
		}
		*field(a) = v
		return ""
	}
}

func parseJWTAlgorithms(v string, a *Annotations, _ *problems) string {
	var algs []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if !config.JWTAlgorithms[s] {
			return fmt.Sprintf("unsupported algorithm %q (want HS256/384/512, RS256/384/512, PS256/384/512, ES256/384/512 or EdDSA)", s)
		}
		if !slices.Contains(algs, s) {
			algs = append(algs, s)
		}
	}
	a.JWTAlgorithms = algs
	return ""
}

// LogLevels are the sidecar's --log-level values.
var LogLevels = []string{"debug", "info", "warn", "error"}

func parseLogLevel(v string, a *Annotations, _ *problems) string {
	if !slices.Contains(LogLevels, v) {
		return fmt.Sprintf("unknown level %q (want debug, info, warn or error)", v)
	}
	a.LogLevel = v
	return ""
}

func parsePrometheusScrape(v string, a *Annotations, _ *problems) string {
	b, rule := parseBool(v)
	if rule == "" {
		a.PrometheusScrape = &b
	}
	return rule
}

func parseConfigMap(v string, a *Annotations, _ *problems) string {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return fmt.Sprintf("must be the name of a ConfigMap in the pod's namespace, got %q", v)
	}
	a.ConfigMap = v
	return ""
}
