package certs

import "github.com/prometheus/client_golang/prometheus"

// ExpiryMetric is the name of the gauge that Collector exports.
const ExpiryMetric = "tether_injector_certificate_expiry_timestamp_seconds"

var expiryDesc = prometheus.NewDesc(ExpiryMetric,
	"When the webhook's serving certificate expires (Unix seconds); absent until one is loaded. "+
		"The API server refuses the webhook once it has passed.", nil, nil)

// Collector exports the expiry of the Store's current certificate. It
// reads the Store at scrape time, so a renewal shows at once.
func (s *Store) Collector() prometheus.Collector { return expiryCollector{s} }

type expiryCollector struct{ s *Store }

func (c expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

func (c expiryCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.s.cur.Load()
	if l == nil || l.cert.Leaf == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(l.cert.Leaf.NotAfter.Unix()))
}
