package inject

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// prometheusScrape decides whether the pod gets Prometheus' scrape
// annotations for the sidecar's admin port: when the pod asks
// (tether.dev/prometheus-scrape: "true") or the chart does
// (sidecar.prometheusScrape), unless the pod has prometheus.io/
// annotations of its own, which name the router's metrics (Prometheus
// reads one port and path per pod). Asked by the pod, that is a denial;
// asked by the chart, a warning, and the pod keeps its own.
func (inj *Injector) prometheusScrape(a *Annotations, pod *corev1.Pod, p problems) (bool, string, problems) {
	want := inj.opts.PrometheusScrape
	if a.PrometheusScrape != nil {
		want = *a.PrometheusScrape
	}
	if !want {
		return false, "", p
	}
	for _, k := range prometheusAnnotations {
		v, ok := pod.Annotations[k]
		if !ok {
			continue
		}
		if a.PrometheusScrape != nil {
			p.add(AnnotationPrometheusScrape, "the pod already has %s: %q (the router's own metrics; Prometheus reads one port per pod from these annotations): "+
				"scrape the sidecar with the chart's PodMonitor (monitoring.podMonitor.enabled) instead", k, v)
			return false, "", p
		}
		return false, fmt.Sprintf("tether: the pod's own %s: %q is kept, so Prometheus does not scrape the sidecar through annotations; use the chart's PodMonitor (monitoring.podMonitor.enabled)", k, v), p
	}
	return true, "", p
}

// addScrapeAnnotations points Prometheus at the sidecar's /metrics and
// returns the keys it set, for the status annotation.
func addScrapeAnnotations(pod *corev1.Pod, adminPort int) []string {
	setAnnotation(pod, PrometheusScrape, "true")
	setAnnotation(pod, PrometheusPort, strconv.Itoa(adminPort))
	setAnnotation(pod, PrometheusPath, MetricsPath)
	return []string{PrometheusScrape, PrometheusPort, PrometheusPath}
}
