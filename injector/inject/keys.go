// Package inject decides whether a pod gets the tether sidecar and builds
// the mutated pod. It is pure: a Pod goes in, a mutated Pod (or a skip
// reason, or a denial naming the annotation at fault) comes out. It knows
// nothing of HTTP or of the API server, so the webhook, the tests and any
// CLI call it directly.
package inject

import "github.com/tetherproxy/tether/sidecar/config"

// Annotation and label keys. Every key is part of the public contract
// (README "Annotations"); add keys, never rename them.
const (
	// Prefix is the prefix of every tether annotation. An unknown key with
	// this prefix is a typo and denies the pod.
	Prefix = "tether.dev/"

	// AnnotationInject: "false" opts a pod out; "true" opts it in. As a
	// label it also steers the API server (objectSelector): the label
	// "true" brings pods of unlabelled namespaces to the webhook.
	AnnotationInject = Prefix + "inject"
	// LabelInject is the same key used as a pod label.
	LabelInject = AnnotationInject
	// NamespaceLabel enables injection for a namespace ("enabled").
	NamespaceLabel = Prefix + "injection"
	// NamespaceLabelValue is the value of NamespaceLabel that enables injection.
	NamespaceLabelValue = "enabled"

	AnnotationPool            = Prefix + "pool"
	AnnotationSources         = Prefix + "sources"
	AnnotationTTL             = Prefix + "ttl"
	AnnotationBackendSelector = Prefix + "backend-selector"
	AnnotationBackendPort     = Prefix + "backend-port"
	AnnotationPrefillSelector = Prefix + "prefill-selector"
	AnnotationDecodeSelector  = Prefix + "decode-selector"
	AnnotationPDGroupLabel    = Prefix + "pd-group-label"
	// AnnotationModelServer names a Kthena ModelServer in the pod's
	// namespace that defines the pool (its pods, port, model, timeout and
	// sessionSticky) instead of the backend and session annotations.
	AnnotationModelServer = Prefix + "model-server"
	AnnotationAffinity    = Prefix + "affinity"
	// AnnotationAffinityPolicy is soft affinity's policy: threshold or cost.
	AnnotationAffinityPolicy = Prefix + "affinity-policy"
	AnnotationListenPort     = Prefix + "listen-port"
	AnnotationAdminPort      = Prefix + "admin-port"
	AnnotationGossipPort     = Prefix + "gossip-port"
	// AnnotationDebugPort moves the loopback debug listener (/debug/*).
	AnnotationDebugPort = Prefix + "debug-port"

	AnnotationStore               = Prefix + "store"
	AnnotationRedisAddress        = Prefix + "redis-address"
	AnnotationRedisPasswordSecret = Prefix + "redis-password-secret"
	// AnnotationRedisCASecret names a Secret (key "ca.crt", PEM) whose CA
	// verifies Redis's TLS certificate instead of the system roots; it
	// turns TLS on.
	AnnotationRedisCASecret   = Prefix + "redis-ca-secret"
	AnnotationRedisUsername   = Prefix + "redis-username"
	AnnotationRedisTLS        = Prefix + "redis-tls"
	AnnotationGossipKeySecret = Prefix + "gossip-key-secret"
	// AnnotationStoreKeySecret names a Secret (key "key") whose content
	// keys the store keys (store.keySecretFile): an HMAC instead of a
	// plain hash. Gossip pods use their gossip key Secret without it.
	AnnotationStoreKeySecret = Prefix + "store-key-secret"
	// AnnotationRedisRequireAtStartup "false" starts a Redis pod degraded
	// (unsticky, ready) while Redis is unreachable, instead of failing.
	AnnotationRedisRequireAtStartup = Prefix + "redis-require-at-startup"
	// AnnotationGossipRequireAtStartup "false" makes a gossip pod ready
	// without waiting for the ring's state.
	AnnotationGossipRequireAtStartup = Prefix + "gossip-require-at-startup"

	AnnotationJWTSecret     = Prefix + "jwt-secret"
	AnnotationJWTAlgorithms = Prefix + "jwt-algorithms"
	AnnotationJWTIssuer     = Prefix + "jwt-issuer"
	AnnotationJWTAudience   = Prefix + "jwt-audience"
	// AnnotationJWTRequireExp "true" refuses tokens without exp
	// (jwt.requireExp).
	AnnotationJWTRequireExp = Prefix + "jwt-require-exp"

	// Per-pod knobs of the sidecar container (they apply with a ConfigMap
	// config too).
	AnnotationLogLevel = Prefix + "log-level"
	// AnnotationProxyCPU and AnnotationProxyMemory are "REQUEST" or
	// "REQUEST/LIMIT" (Kubernetes quantities: 100m, 100m/500m, 128Mi/512Mi).
	AnnotationProxyCPU    = Prefix + "proxy-cpu"
	AnnotationProxyMemory = Prefix + "proxy-memory"
	// AnnotationPrometheusScrape "true" adds prometheus.io/scrape, port and
	// path for the sidecar's admin port; "false" keeps a chart-wide default off.
	AnnotationPrometheusScrape = Prefix + "prometheus-scrape"
	// AnnotationSessionTokenSecret names the Secret (key "key") whose HMAC
	// key signs and verifies the pool's session tokens (Token sources).
	AnnotationSessionTokenSecret = Prefix + "session-token-secret"

	// AnnotationConfig names a ConfigMap (key config.yaml) holding a full,
	// possibly multi-pool, sidecar config instead of the pool annotations.
	AnnotationConfig = Prefix + "config"

	// AnnotationStatus records what the injector added (see Status).
	AnnotationStatus = Prefix + "status"

	// LabelInjected ("true") marks every pod the injector gave a sidecar:
	// the RoleBinding controller binds the service accounts of these pods.
	LabelInjected = Prefix + "injected"
	// LabelGossipPort carries a gossip pod's gossip port, so a
	// NetworkPolicy can select the pods whose port it protects.
	LabelGossipPort = Prefix + "gossip-port"
)

// injectorLabels are the labels the injector sets; they are no part of a
// router's identity (peer selection) and are removed when a pod is
// injected again.
var injectorLabels = []string{LabelInjected, LabelGossipPort}

// poolKeys configure the single pool rendered from annotations; they make
// no sense next to tether.dev/config, whose ConfigMap holds all of that.
var poolKeys = []string{
	AnnotationPool, AnnotationSources, AnnotationTTL,
	AnnotationBackendSelector, AnnotationBackendPort,
	AnnotationPrefillSelector, AnnotationDecodeSelector, AnnotationPDGroupLabel, AnnotationModelServer,
	AnnotationAffinity, AnnotationAffinityPolicy, AnnotationListenPort, AnnotationDebugPort, AnnotationRedisAddress,
	AnnotationRedisUsername, AnnotationRedisTLS, AnnotationRedisRequireAtStartup, AnnotationGossipRequireAtStartup,
	AnnotationJWTAlgorithms, AnnotationJWTIssuer, AnnotationJWTAudience, AnnotationJWTRequireExp,
}

// Paths inside the sidecar container. The sidecar config rendered from
// annotations refers to them; a ConfigMap config should too.
const (
	ConfigDir           = "/etc/tether"
	ConfigFile          = ConfigDir + "/config.yaml"
	ConfigMapKey        = "config.yaml"
	SecretsDir          = "/var/run/secrets/tether"
	RedisPasswordDir    = SecretsDir + "/redis"
	RedisPasswordKey    = "password"
	RedisCADir          = SecretsDir + "/redis-ca"
	RedisCAKey          = "ca.crt"
	GossipKeyDir        = SecretsDir + "/gossip"
	GossipKeyKey        = "key"
	JWTDir              = SecretsDir + "/jwt"
	JWTHMACSecretKey    = "hmac-secret"
	JWTPublicKeyKey     = "public.pem"
	SessionTokenDir     = SecretsDir + "/session-token"
	SessionTokenKey     = "key"
	StoreKeyDir         = SecretsDir + "/store-key"
	StoreKeyKey         = "key"
	serviceAccountMount = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// Sidecar ports and names. The default ports are the sidecar's own
// defaults, clear of Istio's and Linkerd's (see sidecar/config).
const (
	ContainerName = "tether-sidecar"
	// Binary is the sidecar's path in its image (the image's entrypoint
	// is not relied on).
	Binary            = "/tether-sidecar"
	AdminPort         = config.DefaultAdminPort
	AdminPortName     = "tether-admin"
	DebugPort         = config.DefaultDebugPort
	GossipPort        = config.DefaultGossipPort
	GossipPortName    = "tether-gossip"
	GossipUDPPortName = "tether-gossip-u"
	DefaultListenPort = config.DefaultListenPort
	// EnvConfig carries the rendered config when no ConfigMap is used.
	EnvConfig = "TETHER_CONFIG"
	// EnvGoMemLimit is set from the sidecar's memory limit (see
	// config.GoMemLimit); the sidecar derives its stores' default
	// maxEntries from it, and the injector writes that maxEntries into a
	// rendered config.
	EnvGoMemLimit = "GOMEMLIMIT"
)

// Prometheus' conventional scrape annotations, added for the sidecar's
// admin port when asked (AnnotationPrometheusScrape or the chart's
// sidecar.prometheusScrape).
const (
	PrometheusScrape = "prometheus.io/scrape"
	PrometheusPort   = "prometheus.io/port"
	PrometheusPath   = "prometheus.io/path"
	// MetricsPath is the sidecar's metrics endpoint on its admin port.
	MetricsPath = "/metrics"
)

// prometheusAnnotations are the keys a pod can hold only once: one port
// and path per pod.
var prometheusAnnotations = []string{PrometheusScrape, PrometheusPort, PrometheusPath, "prometheus.io/scheme"}

// Volume names the injector adds; listed in the status annotation.
const (
	volConfig  = "tether-config"
	volRedis   = "tether-redis-password"
	volRedisCA = "tether-redis-ca"
	volGossip  = "tether-gossip-key"
	volJWT     = "tether-jwt"
	volToken   = "tether-session-token"
	volStore   = "tether-store-key"
)
