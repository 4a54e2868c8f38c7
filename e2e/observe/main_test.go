package observe_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every sidecar, the injector, the load and the HTTP clients stop with
// their test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
