// Package session reads a request's session key: a pool's sources
// (Header, Query, Cookie, JWTClaim, Token, Body) tried in order, the first
// non-empty value winning, and hashes it into the store key that stands in
// for it everywhere else (StoreKey). It knows no stores and no backends:
// the resolver turns the Key into a decision.
package session

import (
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/reqview"
	"github.com/tetherproxy/tether/sidecar/token"
)

// MaxKeyBytes bounds a session key. A longer value counts as absent: no
// real session identifier is that long, the store key is a hash so length
// buys nothing, and refusing it keeps a client from making every request
// hash and compare kilobytes (or a rendered JWT array) on the hot path. The
// request degrades to unsticky balancing, never to an error.
const MaxKeyBytes = 4096

// ClaimReader reads one claim of a bearer token it has verified itself.
// ok is false for an invalid token or an absent claim. jwtauth.Verifier
// implements it.
type ClaimReader interface {
	Claim(token, name string) (value string, ok bool)
}

// MultiClaimReader is an optional extension of ClaimReader: verify a token
// once and read several claims. values[i] is "" when names[i] yields
// nothing; ok is false when the token is invalid or yields no claim at all.
// The Extractor uses it so that a pool with several JWTClaim sources pays
// for one signature check per request.
type MultiClaimReader interface {
	Claims(token string, names []string) (values []string, ok bool)
}

// Option configures an Extractor.
type Option func(*Extractor)

// WithTokens lets Token sources yield keys: a token the codec verifies,
// so a forged or foreign token falls through to the next source. Without
// it Token sources never yield. When the codec names a token cookie, the
// cookie is read back as one more Token source, right after the pool's
// Token sources (first when it has none): a browser sends it on every
// request.
func WithTokens(c *token.Codec) Option { return func(e *Extractor) { e.tokens = c } }

// Key is what a request's sources yielded.
type Key struct {
	// Value is the session key; "" when no source yielded one.
	Value string
	// Source is the type of the source that yielded Value.
	Source config.SourceType
	// Token is the payload of a Token source's token, verified once here
	// (Source is config.SourceToken): it names the session's backend, so
	// the resolver routes by it instead of looking Value up.
	Token token.Payload
}

// Extractor finds a request's session key from a pool's sources, in order.
// It is immutable and safe for concurrent use.
type Extractor struct {
	sources []source
	claims  ClaimReader
	tokens  *token.Codec
	prefill string // canonical key of the tokens' prefill header; "" without tokens
	multi   bool   // claims implements MultiClaimReader
	// jwtNames lists the claim names of the JWTClaim sources in order;
	// each JWTClaim source knows its index here.
	jwtNames []string
}

type source struct {
	typ  config.SourceType
	name string // canonical header key for Header sources
	jwt  int    // index into jwtNames for JWTClaim sources
	// cookie marks the token cookie's source (typ is SourceToken, name
	// the cookie's).
	cookie bool
}

// NewExtractor prepares sources (validated by config) for extraction.
// claims may be nil, in which case JWTClaim sources never yield a key.
func NewExtractor(sources []config.Source, claims ClaimReader, opts ...Option) *Extractor {
	e := &Extractor{claims: claims}
	for _, o := range opts {
		o(e)
	}
	_, e.multi = claims.(MultiClaimReader)
	for _, s := range sources {
		src := source{typ: s.Type, name: s.Name}
		switch s.Type {
		case config.SourceHeader, config.SourceToken:
			// net/http stores header keys canonicalised, so looking up the
			// canonical form is a case-insensitive match.
			src.name = textproto.CanonicalMIMEHeaderKey(s.Name)
		case config.SourceJWTClaim:
			src.jwt = len(e.jwtNames)
			e.jwtNames = append(e.jwtNames, s.Name)
		case config.SourceQuery, config.SourceCookie, config.SourceBody:
		default:
			continue // config.Validate rejects it; never match it here
		}
		e.sources = append(e.sources, src)
	}
	if e.tokens != nil {
		if h := e.tokens.PrefillHeader(); h != "" {
			e.prefill = textproto.CanonicalMIMEHeaderKey(h)
		}
		if name := e.tokens.CookieName(); name != "" {
			at := 0
			for i, s := range e.sources {
				if s.typ == config.SourceToken {
					at = i + 1
				}
			}
			e.sources = slices.Insert(e.sources, at, source{typ: config.SourceToken, name: name, cookie: true})
		}
	}
	return e
}

// Extract returns the first non-empty key the sources yield with the type
// of the source that yielded it, or the zero Key when none does.
//
// Rules: a Header source matches its name case-insensitively and reads the
// header's first value; a Query source matches the parameter name exactly
// and reads its first value (a malformed query yields whatever pairs did
// parse); a Cookie source matches the name exactly (case-sensitive) and
// reads the first cookie of that name; a JWTClaim source reads the claim
// from the `Authorization: Bearer` token (scheme case-insensitive) only if
// the ClaimReader verified it; a Token source reads header Name like a
// Header source but only a token the codec verifies (the key is then the
// token, and Key.Token its payload, whose prefill half a token naming none
// takes from the prefill token header); the token cookie is a Token
// source read from the cookie; a Body source reads the string at
// its dotted path in the JSON body the proxy buffered (reqbody: scanned
// once per request for every field the listener reads; other JSON types
// yield nothing). Values longer than MaxKeyBytes are
// absent. The query string and the bearer token are each parsed at most
// once, and a token's MAC is checked once.
func (e *Extractor) Extract(r *http.Request) Key { return e.ExtractFrom(reqview.OfRequest(r)) }

// ExtractFrom is Extract reading the request through v.
func (e *Extractor) ExtractFrom(v reqview.View) Key {
	var (
		query     url.Values
		queryDone bool
		token     string
		jwtVals   []string
		jwtDone   bool
	)
	for _, s := range e.sources {
		var val string
		switch s.typ {
		case config.SourceHeader:
			val = v.Header(s.name)
		case config.SourceToken:
			// Verify rejects tokens over token.MaxTokenBytes (< MaxKeyBytes).
			if tok := e.token(v, s); tok != "" {
				if p, ok := e.tokens.Verify(tok); ok {
					return Key{Value: tok, Source: s.typ, Token: e.withPrefill(v, p)}
				}
			}
		case config.SourceQuery:
			if !queryDone {
				queryDone = true
				// ParseQuery keeps the pairs it could parse when it
				// reports an error; those are still the client's values.
				query, _ = url.ParseQuery(v.RawQuery())
			}
			if vs := query[s.name]; len(vs) > 0 {
				val = vs[0]
			}
		case config.SourceCookie:
			val, _ = v.Cookie(s.name)
		case config.SourceBody:
			val, _ = v.Body().String(s.name)
		case config.SourceJWTClaim:
			if !jwtDone {
				jwtDone = true
				token, jwtVals = e.readClaims(v)
			}
			switch {
			case jwtVals != nil:
				val = jwtVals[s.jwt]
			case token != "" && !e.multi:
				val, _ = e.claims.Claim(token, e.jwtNames[s.jwt])
			}
		}
		if val != "" && len(val) <= MaxKeyBytes {
			return Key{Value: val, Source: s.typ}
		}
	}
	return Key{}
}

// token is the raw value of a Token source: its header's first value, or
// the token cookie's; "" when absent or without a codec to verify it.
func (e *Extractor) token(v reqview.View, s source) string {
	switch {
	case e.tokens == nil:
		return ""
	case s.cookie:
		tok, _ := v.Cookie(s.name)
		return tok
	}
	return v.Header(s.name)
}

// withPrefill completes a token that names no prefill backend (llm-d's
// token names one pod) with the prefill token the request carries in the
// prefill header (llm-d's x-session-token-prefill): its backend is the
// pair's prefill half. A signed tether token already names both halves.
func (e *Extractor) withPrefill(v reqview.View, p token.Payload) token.Payload {
	if p.Prefill != "" || e.prefill == "" {
		return p
	}
	if tok := v.Header(e.prefill); tok != "" {
		if pf, ok := e.tokens.Verify(tok); ok {
			p.Prefill = pf.Backend
		}
	}
	return p
}

// readClaims finds the bearer token and, when the reader can, verifies
// it once and reads every JWTClaim source's claim ("" where absent).
func (e *Extractor) readClaims(v reqview.View) (token string, vals []string) {
	if e.claims == nil {
		return "", nil
	}
	token = bearer(v.Header("Authorization"))
	if token == "" || !e.multi {
		return token, nil
	}
	vals, ok := e.claims.(MultiClaimReader).Claims(token, e.jwtNames)
	if !ok || len(vals) != len(e.jwtNames) {
		return "", nil
	}
	return token, vals
}

// bearer returns the token of an "Bearer <token>" Authorization value, the
// scheme matched case-insensitively (RFC 9110 §11.1), or "".
func bearer(h string) string {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
