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
	AnnotationAffinity        = Prefix + "affinity"
	AnnotationListenPort      = Prefix + "listen-port"
	AnnotationAdminPort       = Prefix + "admin-port"
	AnnotationGossipPort      = Prefix + "gossip-port"

	AnnotationStore               = Prefix + "store"
	AnnotationRedisAddress        = Prefix + "redis-address"
	AnnotationRedisPasswordSecret = Prefix + "redis-password-secret"
	AnnotationRedisUsername       = Prefix + "redis-username"
	AnnotationRedisTLS            = Prefix + "redis-tls"
	AnnotationGossipKeySecret     = Prefix + "gossip-key-secret"

	AnnotationJWTSecret     = Prefix + "jwt-secret"
	AnnotationJWTAlgorithms = Prefix + "jwt-algorithms"
	AnnotationJWTIssuer     = Prefix + "jwt-issuer"
	AnnotationJWTAudience   = Prefix + "jwt-audience"

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
	AnnotationPrefillSelector, AnnotationDecodeSelector, AnnotationPDGroupLabel,
	AnnotationAffinity, AnnotationListenPort, AnnotationRedisAddress,
	AnnotationRedisUsername, AnnotationRedisTLS,
	AnnotationJWTAlgorithms, AnnotationJWTIssuer, AnnotationJWTAudience,
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
	GossipKeyDir        = SecretsDir + "/gossip"
	GossipKeyKey        = "key"
	JWTDir              = SecretsDir + "/jwt"
	JWTHMACSecretKey    = "hmac-secret"
	JWTPublicKeyKey     = "public.pem"
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
	GossipPort        = config.DefaultGossipPort
	GossipPortName    = "tether-gossip"
	GossipUDPPortName = "tether-gossip-u"
	DefaultListenPort = config.DefaultListenPort
	// EnvConfig carries the rendered config when no ConfigMap is used.
	EnvConfig = "TETHER_CONFIG"
)

// Volume names the injector adds; listed in the status annotation.
const (
	volConfig = "tether-config"
	volRedis  = "tether-redis-password"
	volGossip = "tether-gossip-key"
	volJWT    = "tether-jwt"
)
