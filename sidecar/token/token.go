// Package token is tether's stateless session token: the backend a
// session was sent to, written into a response header and read back from
// the next request, so a session sticks without any shared store.
//
// Unlike llm-d's plain base64("namespace/name"), the token is
// authenticated, base64url(payload) "." base64url(HMAC-SHA256), so a client
// cannot aim its traffic at a pod of its choosing. The payload names the
// pool (a token of one pool is worthless in another), the backend, the
// prefill backend of a PD pair, when the session was placed there (soft
// affinity's cool-down holds across replicas without a store), and when
// the token lapses: the pool's TTL after it was issued, renewed by every
// response, so a leaked token is worthless once its session is idle.
// Keys rotate: the current key signs, the current and the previous key
// verify. A request's token is verified once, by the session extractor;
// the resolver signs the tokens a decision carries, and the proxy writes
// them into the response headers the Codec names.
package token

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetherproxy/tether/sidecar/config"
)

// MaxTokenBytes bounds a token read from a request; a real one is ~150 bytes.
const MaxTokenBytes = 1024

// MinKeyBytes is the shortest HMAC key accepted (RFC 2104: at least the
// hash output length).
const MinKeyBytes = 32

// domain separates tether's MACs from any other use of the same key.
const domain = "tether-session-token/v1."

// Payload is what a token says.
type Payload struct {
	Pool    string `json:"p"`
	Backend string `json:"b"`
	Prefill string `json:"f,omitempty"`
	// Since is when the session was placed on Backend (unix seconds).
	Since int64 `json:"t,omitempty"`
	// Expires is when the token stops being accepted (unix seconds): the
	// pool's TTL after it was issued. Every response of the session
	// carries a new token, so a session in use never sees it lapse, like
	// a binding's sliding expiry.
	Expires int64 `json:"e,omitempty"`
}

// Codec signs and verifies the tokens of one pool, and knows the response
// headers they travel in.
type Codec struct {
	pool                  string
	cur, prev             []byte
	allowUnsigned         bool
	header, prefillHeader string
	cookie                cookie
	// ttl is how long a token is valid after it is issued; 0: forever
	// (tests of the format). now is the clock.
	ttl time.Duration
	now func() time.Time
}

// New reads the keys of cfg for a pool whose bindings live ttl. Key files
// hold the raw key; surrounding whitespace (a trailing newline) is
// trimmed.
func New(pool string, ttl time.Duration, cfg *config.SessionToken) (*Codec, error) {
	cur, err := readKey(cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("sessionToken.keyFile: %w", err)
	}
	var prev []byte
	if cfg.PreviousKeyFile != "" {
		if prev, err = readKey(cfg.PreviousKeyFile); err != nil {
			return nil, fmt.Errorf("sessionToken.previousKeyFile: %w", err)
		}
	}
	c := NewWithKeys(pool, cur, prev, cfg.AllowUnsigned).WithTTL(ttl, nil)
	c.header, c.prefillHeader = cfg.Header, cfg.PrefillHeader
	c.cookie = cookieOf(cfg.Cookie)
	return c, nil
}

// WithTTL makes c issue tokens valid for ttl from their issue on the
// clock now (nil: time.Now), and refuse signed tokens without an expiry
// or past it. It returns c.
func (c *Codec) WithTTL(ttl time.Duration, now func() time.Time) *Codec {
	if now == nil {
		now = time.Now
	}
	c.ttl, c.now = ttl, now
	return c
}

func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinKeyBytes {
		return nil, fmt.Errorf("%s: key is %d bytes, at least %d are required", path, len(b), MinKeyBytes)
	}
	return b, nil
}

// NewWithKeys returns a Codec with the given keys (prev may be nil) and
// the default headers.
func NewWithKeys(pool string, cur, prev []byte, allowUnsigned bool) *Codec {
	return &Codec{pool: pool, cur: cur, prev: prev, allowUnsigned: allowUnsigned,
		header: config.DefaultSessionTokenHeader, prefillHeader: config.DefaultPrefillTokenHeader}
}

// Header is the response header a session's token is written to (and
// Token sources read back).
func (c *Codec) Header() string { return c.header }

// PrefillHeader is the header of a PD pair's prefill token, written to
// responses and read back from requests (llm-d's x-session-token-prefill).
func (c *Codec) PrefillHeader() string { return c.prefillHeader }

// Sign returns the token of backend (and prefill, in PD pools), placed at since.
func (c *Codec) Sign(backend, prefill string, since time.Time) string {
	var t int64
	if !since.IsZero() {
		t = since.Unix()
	}
	var exp int64
	if c.ttl > 0 {
		// Rounded up to the second, so a token never lapses before the
		// pool's TTL has passed.
		exp = c.now().Add(c.ttl + time.Second - 1).Unix()
	}
	p, _ := json.Marshal(Payload{Pool: c.pool, Backend: backend, Prefill: prefill, Since: t, Expires: exp})
	enc := base64.RawURLEncoding.EncodeToString(p)
	return enc + "." + base64.RawURLEncoding.EncodeToString(mac(c.cur, enc))
}

// Prefill returns the llm-d-style companion token of a PD pair's prefill
// backend: signed like any other, naming the prefill backend.
func (c *Codec) Prefill(prefill string, since time.Time) string { return c.Sign(prefill, "", since) }

func mac(key []byte, enc string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(domain))
	h.Write([]byte(enc))
	return h.Sum(nil)
}

// Verify returns the payload of a token signed with the current or the
// previous key for this pool. With allowUnsigned, a token without a MAC
// is read as llm-d's base64("namespace/name") (or a static backend's
// host:port) and returned as Backend, to be matched by name.
func (c *Codec) Verify(tok string) (Payload, bool) {
	if tok == "" || len(tok) > MaxTokenBytes {
		return Payload{}, false
	}
	enc, sig, signed := strings.Cut(tok, ".")
	if !signed {
		return c.unsigned(tok)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return Payload{}, false
	}
	if !hmac.Equal(got, mac(c.cur, enc)) && (c.prev == nil || !hmac.Equal(got, mac(c.prev, enc))) {
		return Payload{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return Payload{}, false
	}
	var p Payload
	if json.Unmarshal(raw, &p) != nil || p.Pool != c.pool || p.Backend == "" {
		return Payload{}, false
	}
	if c.ttl > 0 && (p.Expires == 0 || c.now().Unix() >= p.Expires) {
		return Payload{}, false // lapsed, or from a codec that set no expiry
	}
	return p, true
}

func (c *Codec) unsigned(tok string) (Payload, bool) {
	if !c.allowUnsigned {
		return Payload{}, false
	}
	raw, err := base64.StdEncoding.DecodeString(tok)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(tok); err != nil {
			return Payload{}, false
		}
	}
	name := string(raw)
	if name == "" || !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\n\r") {
		return Payload{}, false
	}
	return Payload{Pool: c.pool, Backend: name}, true
}
