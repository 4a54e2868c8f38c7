package testkit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric is the value of the one sample of family name in g whose labels
// include every name/value pair of labels ("pool", "chat", ...); it fails
// t unless exactly one sample matches. Counters, gauges and untyped
// samples have a value; histograms and summaries do not.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, err := FindMetric(g, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ErrNotFound is FindMetric's error when no sample matches (wrapped).
var ErrNotFound = errors.New("not found")

// FindMetric is Metric for polling and optional series: the error says
// why no single sample matches, and is ErrNotFound when none does.
func FindMetric(g prometheus.Gatherer, name string, labels ...string) (float64, error) {
	if len(labels)%2 != 0 {
		return 0, fmt.Errorf("metric %s: labels %q are not name/value pairs", name, labels)
	}
	mfs, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("gathering metrics: %w", err)
	}
	i := slices.IndexFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == name })
	if i < 0 {
		return 0, fmt.Errorf("metric %s%s %w", name, braces(labels), ErrNotFound)
	}
	var found []*dto.Metric
	for _, m := range mfs[i].GetMetric() {
		if hasLabels(m, labels) {
			found = append(found, m)
		}
	}
	switch {
	case len(found) == 0:
		return 0, fmt.Errorf("metric %s%s %w", name, braces(labels), ErrNotFound)
	case len(found) > 1:
		return 0, fmt.Errorf("metric %s%s: %d samples match, want one", name, braces(labels), len(found))
	}
	m := found[0]
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue(), nil
	case m.Gauge != nil:
		return m.GetGauge().GetValue(), nil
	case m.Untyped != nil:
		return m.GetUntyped().GetValue(), nil
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount()), nil // a histogram's value is its count
	}
	return 0, fmt.Errorf("metric %s%s is neither a counter, a gauge nor a histogram", name, braces(labels))
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i < len(labels); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
			return lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
		}) {
			return false
		}
	}
	return true
}

func braces(labels []string) string {
	if len(labels) == 0 {
		return ""
	}
	var ps []string
	for i := 0; i+1 < len(labels); i += 2 {
		ps = append(ps, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	return "{" + strings.Join(ps, ",") + "}"
}

var scrapeClient = &http.Client{Timeout: 10 * time.Second}

// Scrape reads the Prometheus text exposition at url once, as a scraper
// would, and returns it as a Gatherer for Metric: several reads of one
// Scrape see one moment. It fails t when the endpoint cannot be read.
func Scrape(t testing.TB, url string) prometheus.Gatherer {
	t.Helper()
	g, err := ScrapeURL(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// ScrapeURL is Scrape for code that is not a test (benchmarks, tools):
// the error says why the endpoint could not be read. FindMetric reads
// the samples.
func ScrapeURL(ctx context.Context, url string) (prometheus.Gatherer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	mfs := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		mfs = append(mfs, mf)
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, nil }), nil
}
