package app_test

import "flag"

// update is accepted so that `go test ./injector/... -update` (which
// rewrites injector/inject's golden files) also runs this package.
var _ = flag.Bool("update", false, "rewrite golden files (none in this package)")
