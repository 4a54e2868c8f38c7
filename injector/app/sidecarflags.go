package app

import (
	"flag"
	"slices"

	"github.com/tetherproxy/tether/injector/inject"
)

// SidecarFlags are the flags that set what the webhook gives a pod (the
// chart's sidecar.* and webhook.excludedNamespaces values), as opposed to
// how the injector itself runs. `tether-injector inject` takes exactly
// these, so an offline injection can be given the arguments of the
// injector's Deployment.
var SidecarFlags = []string{
	"sidecar-image", "sidecar-image-pull-policy",
	"sidecar-cpu-request", "sidecar-memory-request", "sidecar-cpu-limit", "sidecar-memory-limit",
	"native-sidecar", "prestop-sleep", "default-store",
	"redis-address", "redis-password-secret", "redis-username", "redis-tls", "redis-ca-secret",
	"gossip-key-secret", "exclude-namespace", "sidecar-prometheus-scrape",
}

// RegisterSidecarFlags binds the SidecarFlags of c to fs, with the same
// names, defaults and help as the injector's own.
func (c *Config) RegisterSidecarFlags(fs *flag.FlagSet) {
	all := flag.NewFlagSet("tether-injector", flag.ContinueOnError)
	c.RegisterFlags(all, "")
	all.VisitAll(func(f *flag.Flag) {
		if slices.Contains(SidecarFlags, f.Name) {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
}

// InjectOptions are the inject.Options the webhook runs with under c.
func (c *Config) InjectOptions() (inject.Options, error) { return c.injectOptions() }
