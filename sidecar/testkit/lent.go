package testkit

import (
	"testing"

	"github.com/tetherproxy/tether/sidecar/bufpool"
)

// LentSince returns a check of the buffers bufpool has out beyond those
// out now: check(when, want) fails t, naming when, if they are not want.
// The proxy's tests use it to see a connection give its buffers back.
func LentSince(t testing.TB) (check func(when string, want int64)) {
	base := bufpool.Lent()
	return func(when string, want int64) {
		t.Helper()
		if n := bufpool.Lent() - base; n != want {
			t.Errorf("%s: %d buffers lent, want %d", when, n, want)
		}
	}
}
