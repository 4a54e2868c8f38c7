// Package jwtauth verifies the bearer tokens that JWTClaim session sources
// read claims from. A token yields a claim only when its signature verifies
// with a configured key of the token's own algorithm family, the algorithm
// is one the configuration allows, and exp/nbf/iss/aud hold. Anything else
// is counted by reason and yields nothing, so the request simply falls
// through to the next session source.
package jwtauth

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
)

// Leeway absorbs clock skew between the token issuer and this pod when
// checking exp and nbf.
const Leeway = 30 * time.Second

// Rejection reasons, the values of tether_jwt_rejected_total's label.
const (
	ReasonMalformed    = "malformed"     // not three base64url JSON segments, or bad claim types
	ReasonSignature    = "signature"     // no configured key verifies the signature
	ReasonAlgorithm    = "algorithm"     // alg not in jwt.algorithms (including "none")
	ReasonExpired      = "expired"       // exp in the past
	ReasonNoExpiry     = "no_expiry"     // no exp, and jwt.requireExp is set
	ReasonNotYetValid  = "not_yet_valid" // nbf in the future
	ReasonIssuer       = "issuer"        // iss missing or not jwt.issuer
	ReasonAudience     = "audience"      // aud missing or without jwt.audience
	ReasonNoKey        = "no_key"        // no key of the token's type (or kid) is configured
	ReasonMissingClaim = "missing_claim" // valid token, but the claim is absent, null or empty
)

var reasons = []string{ReasonMalformed, ReasonSignature, ReasonAlgorithm, ReasonExpired,
	ReasonNoExpiry, ReasonNotYetValid, ReasonIssuer, ReasonAudience, ReasonNoKey, ReasonMissingClaim}

// Verifier verifies tokens against keys loaded from files and reloaded by
// Run. It is safe for concurrent use.
type Verifier struct {
	cfg     *config.JWT
	log     *slog.Logger
	parser  *jwt.Parser
	allowed map[string]bool
	keys    atomic.Pointer[keySet]

	rejected     *prometheus.CounterVec
	reloadErrors prometheus.Counter

	// Run's state: the file contents the current keys came from, and
	// the last contents that failed to parse (so one bad rotation is
	// logged and counted once, not every poll).
	loaded, failed *keyFiles
	pollEvery      time.Duration
}

// New loads the key files named by cfg and registers the package's metrics
// on reg (which may be nil). Errors name the config field at fault.
func New(cfg *config.JWT, reg prometheus.Registerer, log *slog.Logger) (*Verifier, error) {
	if cfg == nil {
		return nil, errors.New("jwt: no configuration")
	}
	if len(cfg.Algorithms) == 0 {
		return nil, errors.New("jwt.algorithms: at least one algorithm is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{
		cfg:       cfg,
		log:       log,
		allowed:   map[string]bool{},
		pollEvery: 2 * time.Second,
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_jwt_rejected_total",
			Help: "Bearer tokens that yielded no session key, by reason.",
		}, []string{"reason"}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_jwt_key_reload_errors_total",
			Help: "Key file changes that could not be loaded; the previous keys stay in use.",
		}),
	}
	for i, a := range cfg.Algorithms {
		if a == "none" || !config.JWTAlgorithms[a] {
			return nil, fmt.Errorf("jwt.algorithms[%d]: unsupported algorithm %q", i, a)
		}
		v.allowed[a] = true
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(cfg.Algorithms),
		jwt.WithJSONNumber(),
		jwt.WithLeeway(Leeway),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.RequireExp {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	v.parser = jwt.NewParser(opts...)

	files, err := readKeyFiles(cfg)
	if err != nil {
		return nil, err
	}
	ks, err := parseKeyFiles(cfg, files)
	if err != nil {
		return nil, err
	}
	if err := v.checkCoverage(ks); err != nil {
		return nil, err
	}
	v.keys.Store(ks)
	v.loaded = files

	for _, r := range reasons {
		v.rejected.WithLabelValues(r) // export every reason at 0
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{v.rejected, v.reloadErrors} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("jwt: registering metrics: %w", err)
			}
		}
	}
	return v, nil
}

// checkCoverage warns about allowed algorithms that no loaded key can
// verify: such tokens will all be rejected as no_key, which is almost
// certainly a configuration mistake, but not one worth refusing to start
// over (a JWKS may gain the key on the next rotation).
func (v *Verifier) checkCoverage(ks *keySet) error {
	for _, a := range v.cfg.Algorithms {
		m := jwt.GetSigningMethod(a)
		if m == nil {
			return fmt.Errorf("jwt.algorithms: unsupported algorithm %q", a)
		}
		if _, err := ks.keysFor(m, ""); err != nil {
			v.log.Warn("jwt: no configured key can verify an allowed algorithm", "algorithm", a)
		}
	}
	if len(ks.hmac) > 0 && len(ks.hmac) < 32 {
		v.log.Warn("jwt: HMAC secret is shorter than 32 bytes; tokens signed with it are guessable", "bytes", len(ks.hmac))
	}
	return nil
}

// Claim verifies token and returns the named claim rendered as a string
// (see render). ok is false for an invalid token or an absent, null or
// empty claim; the reason is counted.
func (v *Verifier) Claim(token, name string) (value string, ok bool) {
	vals, ok := v.Claims(token, []string{name})
	if !ok || vals[0] == "" {
		return "", false
	}
	return vals[0], true
}

// Claims verifies token once and returns the named claims, each rendered
// as Claim does ("" when absent). ok is false when the token is invalid or
// none of the names yields a value. It lets a request with several
// JWTClaim sources pay for one signature check.
func (v *Verifier) Claims(token string, names []string) (values []string, ok bool) {
	if v == nil { // a typed nil behind session.ClaimReader: no JWT configured
		return nil, false
	}
	claims, reason := v.verify(token)
	if reason != "" {
		v.rejected.WithLabelValues(reason).Inc()
		return nil, false
	}
	values = make([]string, len(names))
	for i, n := range names {
		if s, found := render(claims[n]); found {
			values[i], ok = s, true
		}
	}
	if !ok {
		v.rejected.WithLabelValues(ReasonMissingClaim).Inc()
		return nil, false
	}
	return values, true
}

var errCrit = errors.New(`unsupported "crit" header`)

// verify parses and checks token, returning its claims or a reason.
func (v *Verifier) verify(token string) (jwt.MapClaims, string) {
	ks := v.keys.Load()
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			// RFC 7515 §4.1.11: a token whose critical extensions the
			// recipient does not understand is invalid; we know none.
			return nil, errCrit
		}
		kid, _ := t.Header["kid"].(string)
		return ks.keysFor(t.Method, kid)
	})
	if err == nil && tok.Valid {
		return claims, ""
	}
	return nil, v.classify(tok, claims, err)
}

// classify maps golang-jwt's error to one reason. Checks run in the
// library's order: structure, algorithm, key, signature, then claims, so a
// token is counted under the first thing wrong with it.
func (v *Verifier) classify(tok *jwt.Token, claims jwt.MapClaims, err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed) || tok == nil:
		return ReasonMalformed
	case tok.Method == nil || !v.allowed[tok.Method.Alg()]:
		// Unknown alg, "none", or an alg outside jwt.algorithms.
		return ReasonAlgorithm
	case errors.Is(err, errCrit):
		return ReasonMalformed
	case errors.Is(err, errNoKey):
		return ReasonNoKey
	case errors.Is(err, jwt.ErrTokenSignatureInvalid) || errors.Is(err, jwt.ErrTokenUnverifiable):
		return ReasonSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		return ReasonExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return ReasonNotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return ReasonIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return ReasonAudience
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		// Only exp, iss and aud are ever required (when configured),
		// checked in that order.
		if _, ok := claims["exp"]; v.cfg.RequireExp && !ok {
			return ReasonNoExpiry
		}
		if iss, _ := claims["iss"].(string); v.cfg.Issuer != "" && iss == "" {
			return ReasonIssuer
		}
		return ReasonAudience
	}
	// Left: a registered claim of the wrong JSON type ("exp": "soon").
	return ReasonMalformed
}
