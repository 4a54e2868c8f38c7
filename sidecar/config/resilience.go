package config

import "strings"

// OutlierDetection ejects backends that fail (README "Outlier
// detection"): ConsecutiveFailures transport failures, first-byte
// timeouts or 5xx responses in a row eject a backend for
// BaseEjectionTime times the number of its ejections, at most
// MaxEjectionTime; a refused connection ejects at once. Never more than
// MaxEjectionPercent of a pool's backends are ejected at the same time
// (one always may be).
type OutlierDetection struct {
	// Enabled defaults to true; false never ejects (a failed request is
	// still retried elsewhere when it may be).
	Enabled             *bool    `json:"enabled,omitempty"`
	ConsecutiveFailures int      `json:"consecutiveFailures,omitempty"`
	BaseEjectionTime    Duration `json:"baseEjectionTime,omitzero"`
	MaxEjectionTime     Duration `json:"maxEjectionTime,omitzero"`
	MaxEjectionPercent  int      `json:"maxEjectionPercent,omitempty"`
}

// On reports whether backends are ejected.
func (o OutlierDetection) On() bool { return o.Enabled == nil || *o.Enabled }

// PoolProxy is a pool's own value of the proxy settings that may differ
// per pool; a zero field takes the top-level proxy block's value.
type PoolProxy struct {
	FirstByteTimeout Duration          `json:"firstByteTimeout,omitzero"`
	RetryOnTimeout   *bool             `json:"retryOnTimeout,omitempty"`
	OutlierDetection *OutlierDetection `json:"outlierDetection,omitempty"`
}

// RetriesOnTimeout reports whether an attempt that timed out before its
// response headers is retried elsewhere (retryOnTimeout: true when unset).
func (p PoolProxy) RetriesOnTimeout() bool { return p.RetryOnTimeout == nil || *p.RetryOnTimeout }

// ProxyFor is pool p's effective per-pool proxy settings: its own proxy
// block over the top-level one (after SetDefaults, every field is set).
func (c *Config) ProxyFor(p *Pool) PoolProxy {
	out := PoolProxy{FirstByteTimeout: c.Proxy.FirstByteTimeout, RetryOnTimeout: c.Proxy.RetryOnTimeout}
	od := c.Proxy.OutlierDetection
	if pp := p.Proxy; pp != nil {
		if pp.FirstByteTimeout.Duration != 0 {
			out.FirstByteTimeout = pp.FirstByteTimeout
		}
		if pp.RetryOnTimeout != nil {
			out.RetryOnTimeout = pp.RetryOnTimeout
		}
		if o := pp.OutlierDetection; o != nil {
			if o.Enabled != nil {
				od.Enabled = o.Enabled
			}
			if o.ConsecutiveFailures != 0 {
				od.ConsecutiveFailures = o.ConsecutiveFailures
			}
			if o.BaseEjectionTime.Duration != 0 {
				od.BaseEjectionTime = o.BaseEjectionTime
			}
			if o.MaxEjectionTime.Duration != 0 {
				od.MaxEjectionTime = o.MaxEjectionTime
			}
			if o.MaxEjectionPercent != 0 {
				od.MaxEjectionPercent = o.MaxEjectionPercent
			}
		}
	}
	out.OutlierDetection = &od
	return out
}

// HealthCheck actively checks a pool's static backends: GET Path every
// Interval (Timeout each); UnhealthyThreshold failures in a row make a
// backend unselectable, HealthyThreshold successes in a row selectable
// again. A 2xx answer is a success.
type HealthCheck struct {
	Path               string   `json:"path,omitempty"`
	Interval           Duration `json:"interval,omitzero"`
	Timeout            Duration `json:"timeout,omitzero"`
	UnhealthyThreshold int      `json:"unhealthyThreshold,omitempty"`
	HealthyThreshold   int      `json:"healthyThreshold,omitempty"`
}

// setResilienceDefaults fills the top-level proxy block's per-pool
// settings, honouring the deprecated fields they replaced.
func (p *Proxy) setResilienceDefaults() {
	if p.FirstByteTimeout.Duration == 0 {
		p.FirstByteTimeout.Duration = DefaultFirstByteTimeout
		if p.ResponseHeaderTimeout.Duration > 0 {
			p.FirstByteTimeout = p.ResponseHeaderTimeout
		}
	}
	od := &p.OutlierDetection
	if od.ConsecutiveFailures == 0 {
		od.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if od.BaseEjectionTime.Duration == 0 {
		od.BaseEjectionTime.Duration = DefaultBaseEjectionTime
		if p.FailTimeout.Duration > 0 {
			od.BaseEjectionTime = p.FailTimeout
		}
	}
	if od.MaxEjectionTime.Duration == 0 {
		od.MaxEjectionTime.Duration = max(DefaultMaxEjectionTime, od.BaseEjectionTime.Duration)
	}
	if od.MaxEjectionPercent == 0 {
		od.MaxEjectionPercent = DefaultMaxEjectionPercent
	}
}

func (h *HealthCheck) setDefaults() {
	if h.Path == "" {
		h.Path = DefaultHealthCheckPath
	}
	setDuration(&h.Interval, DefaultHealthCheckInterval)
	setDuration(&h.Timeout, min(DefaultHealthCheckTimeout, h.Interval.Duration))
	if h.UnhealthyThreshold == 0 {
		h.UnhealthyThreshold = DefaultUnhealthyThreshold
	}
	if h.HealthyThreshold == 0 {
		h.HealthyThreshold = DefaultHealthyThreshold
	}
}

func (p *Proxy) validateResilience(e *errs) {
	if p.FailTimeout.Duration < 0 {
		e.add("proxy.failTimeout", "must not be negative, got %s", p.FailTimeout)
	}
	if p.ResponseHeaderTimeout.Duration < 0 {
		e.add("proxy.responseHeaderTimeout", "must not be negative, got %s", p.ResponseHeaderTimeout)
	}
	if p.FirstByteTimeout.Duration <= 0 {
		e.add("proxy.firstByteTimeout", "must be positive, got %s", p.FirstByteTimeout)
	}
	p.OutlierDetection.validate(e, "proxy.outlierDetection", true)
}

// validate checks an outlierDetection block; a pool's (complete false)
// may leave fields unset to inherit them.
func (o *OutlierDetection) validate(e *errs, f string, complete bool) {
	low := 1
	if !complete {
		low = 0
	}
	if o.ConsecutiveFailures < low {
		e.add(f+".consecutiveFailures", "must be at least 1, got %d", o.ConsecutiveFailures)
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"baseEjectionTime", o.BaseEjectionTime}, {"maxEjectionTime", o.MaxEjectionTime}} {
		if d.v.Duration < 0 || (complete && d.v.Duration == 0) {
			e.add(f+"."+d.name, "must be positive, got %s", d.v)
		}
	}
	if o.MaxEjectionPercent < low || o.MaxEjectionPercent > 100 {
		e.add(f+".maxEjectionPercent", "must be 1..100, got %d", o.MaxEjectionPercent)
	}
}

// validateResilience checks a pool's proxy block and health check; c is
// the whole config, whose proxy block the pool's inherits from.
func (p *Pool) validateResilience(e *errs, f string, c *Config) {
	if pp := p.Proxy; pp != nil {
		if pp.FirstByteTimeout.Duration < 0 {
			e.add(f+".proxy.firstByteTimeout", "must be positive, got %s", pp.FirstByteTimeout)
		}
		if pp.OutlierDetection != nil {
			pp.OutlierDetection.validate(e, f+".proxy.outlierDetection", false)
			od := c.ProxyFor(p).OutlierDetection
			if od.MaxEjectionTime.Duration < od.BaseEjectionTime.Duration {
				e.add(f+".proxy.outlierDetection.maxEjectionTime", "must be at least baseEjectionTime (%s), got %s",
					od.BaseEjectionTime, od.MaxEjectionTime)
			}
		}
	}
	h := p.Backends.HealthCheck
	if h == nil {
		return
	}
	hf := f + ".backends.healthCheck"
	if len(p.Backends.Static) == 0 {
		e.add(hf, "only static backends are health-checked (Kubernetes backends are checked by their readiness probes)")
	}
	if !strings.HasPrefix(h.Path, "/") {
		e.add(hf+".path", "must start with /, got %q", h.Path)
	}
	if h.Interval.Duration <= 0 {
		e.add(hf+".interval", "must be positive, got %s", h.Interval)
	}
	if h.Timeout.Duration <= 0 || h.Timeout.Duration > h.Interval.Duration {
		e.add(hf+".timeout", "must be positive and at most interval (%s), got %s", h.Interval, h.Timeout)
	}
	for _, t := range []struct {
		name string
		v    int
	}{{"unhealthyThreshold", h.UnhealthyThreshold}, {"healthyThreshold", h.HealthyThreshold}} {
		if t.v < 1 {
			e.add(hf+"."+t.name, "must be at least 1, got %d", t.v)
		}
	}
}
