package observe_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Every sidecar, the injector, the load and the HTTP clients stop with
// their test. memberlist's Shutdown does not wait for a probe of a peer
// that is under way: that goroutine ends by itself within the probe
// timeout (a second), so it is the one allowed to outlive the test,
// besides those the process keeps for good (testkit.LongLived).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(testkit.LongLived(),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))...)
}
