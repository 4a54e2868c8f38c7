package token

import (
	"net/http"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
)

// cookie is how the session token is set as a browser cookie; the zero
// value means no cookie.
type cookie struct {
	name     string
	secure   bool
	sameSite http.SameSite
}

func cookieOf(c *config.TokenCookie) cookie {
	if c == nil {
		return cookie{}
	}
	ss := http.SameSiteLaxMode
	switch c.SameSite {
	case config.SameSiteStrict:
		ss = http.SameSiteStrictMode
	case config.SameSiteNone:
		ss = http.SameSiteNoneMode
	}
	return cookie{name: c.Name, secure: c.Secure, sameSite: ss}
}

// CookieName is the cookie the token is set in and read back from; ""
// when the pool has no token cookie.
func (c *Codec) CookieName() string { return c.cookie.name }

// Cookie renders the Set-Cookie value that carries tok: HttpOnly (no
// script reads it), Path=/, Max-Age = ttl so it lives as long as the
// binding would, Secure and SameSite as configured.
func (c *Codec) Cookie(tok string, ttl time.Duration) string {
	hc := &http.Cookie{
		Name: c.cookie.name, Value: tok, Path: "/",
		MaxAge:   int(ttl / time.Second),
		HttpOnly: true, Secure: c.cookie.secure, SameSite: c.cookie.sameSite,
	}
	return hc.String()
}
