package app_test

import (
	"flag"
	"testing"

	"github.com/tetherproxy/tether/injector/app"
)

// TestSidecarFlags: every name in SidecarFlags is one of the injector's
// flags, and setting it through RegisterSidecarFlags sets the Config.
func TestSidecarFlags(t *testing.T) {
	var c app.Config
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	c.RegisterSidecarFlags(fs)
	for _, name := range app.SidecarFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("SidecarFlags names %q, which the injector does not have", name)
		}
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n != len(app.SidecarFlags) {
		t.Errorf("%d flags registered, want %d", n, len(app.SidecarFlags))
	}
	if err := fs.Parse([]string{"--sidecar-image=example.com/s:1", "--default-store=redis", "--redis-address=r:6379",
		"--sidecar-prometheus-scrape", "--exclude-namespace=a,b", "--sidecar-memory-limit=1Gi"}); err != nil {
		t.Fatal(err)
	}
	c.Namespace = "tether-system"
	o, err := c.InjectOptions()
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "example.com/s:1" || o.Store != "redis" || o.RedisAddress != "r:6379" || !o.PrometheusScrape ||
		len(o.ExcludedNamespaces) != 4 || o.Resources.Limits.Memory().String() != "1Gi" || !c.NativeSidecar {
		t.Errorf("options %+v", o)
	}
}
