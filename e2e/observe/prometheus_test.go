package observe_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

var (
	pngDir  = flag.String("png", "", "render the dashboard's main panels as PNG into this directory (make dashboard-png)")
	loadFor = flag.Duration("load", 0, "with -png: how long to run the load before rendering")
)

// window is $__rate_interval in the test: four scrapes.
const (
	scrapeInterval = time.Second
	window         = 4 * scrapeInterval
)

// tool finds a Prometheus binary (Debian's prometheus package); missing
// is a failure, never a skip: make deps-prometheus installs it.
func tool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: run `make deps-prometheus` (apt-get install prometheus)", name)
	}
	return path
}

// TestPromtoolCheckRules runs promtool on the rules file as shipped.
func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(tool(t, "promtool"), "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", alertRules)) {
		t.Errorf("promtool check rules:\n%s", out)
	}
}

// TestAgainstPrometheus runs the system under load, scraped by a real
// Prometheus that also loads the rules file, and requires every dashboard
// query to return a series with a value and every alert's signals to
// return series; the rules evaluate without error and the certificate
// alert (the injector's certificate is 10 days from expiry) goes pending.
func TestAgainstPrometheus(t *testing.T) {
	prom := tool(t, "prometheus")
	qs := append(queries(t), readmeQueries(t)...)
	s := startSystem(t)

	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	router := routerPod(t)
	go func() { defer close(loaded); s.load(ctx, router) }()
	defer func() { stop(); <-loaded }()
	start := time.Now()

	p := startPrometheus(t, prom, s)
	testkit.Eventually(t, 30*time.Second, "every target up", func() error {
		r, err := p.query("count(up == 1)", time.Now())
		if err != nil {
			return err
		}
		if n, want := len(r) == 1 && r[0].value == float64(p.targets), true; n != want {
			return fmt.Errorf("targets up: %v of %d", r, p.targets)
		}
		return nil
	})

	// A store outage: with redis-server stopped (SIGSTOP), the Redis
	// sidecar's breaker opens and its sessions fall back to balancing,
	// as Prometheus sees; then it recovers.
	s.redis.Pause()
	testkit.Eventually(t, 30*time.Second, "the store breaker open in Prometheus", func() error {
		r, err := p.query(`tether_store_breaker_open{backend="redis"} == 1`, time.Now())
		if err == nil && len(r) == 0 {
			err = fmt.Errorf("not open")
		}
		return err
	})
	s.redis.Resume()
	testkit.Eventually(t, 30*time.Second, "the store breaker closed again", func() error {
		r, err := p.query(`tether_store_breaker_open{backend="redis"} == 0`, time.Now())
		if err == nil && len(r) == 0 {
			err = fmt.Errorf("still open")
		}
		return err
	})

	// The metric names are checked against what the running code
	// registered. A vector exports a family once it has a child, and
	// some children come with load (the first rebind), hence Eventually.
	testkit.Eventually(t, 30*time.Second, "every metric of every query registered", func() error {
		registered := s.metricNames(t)
		var missing []string
		for _, q := range qs {
			e, err := promql.ParseExpr(expand(q.expr, window))
			if err != nil {
				t.Fatalf("%s: %v", q.where, err)
			}
			for _, n := range metricNames(e) {
				if !registered[n] {
					missing = append(missing, q.where+": "+n)
				}
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not registered by the sidecars, the injector or modelsim:\n%s", strings.Join(missing, "\n"))
		}
		return nil
	})

	// Every panel query returns a series with a value (rates need a full
	// window of scrapes first, hence Eventually).
	for _, q := range qs {
		if q.alert {
			continue
		}
		expr := expand(q.expr, window)
		testkit.Eventually(t, 30*time.Second, q.where+": "+expr, func() error {
			r, err := p.query(expr, time.Now())
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(r, func(s sample) bool { return !math.IsNaN(s.value) }) {
				return fmt.Errorf("no series with a value: %v", r)
			}
			return nil
		})
	}
	// Every alert evaluates, and each of its signals returns series.
	for _, q := range qs {
		if !q.alert {
			continue
		}
		if _, err := p.query(q.expr, time.Now()); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		e, _ := promql.ParseExpr(q.expr)
		for _, sig := range signals(e) {
			testkit.Eventually(t, 30*time.Second, q.where+" signal "+sig.String(), func() error {
				r, err := p.query(sig.String(), time.Now())
				if err == nil && len(r) == 0 {
					err = fmt.Errorf("no series")
				}
				return err
			})
		}
	}
	testkit.Eventually(t, 30*time.Second, "every rule evaluated without error", p.rulesHealthy)
	// Two alerts whose condition the system meets go pending (their for:
	// keeps them from firing within a test).
	for _, active := range []string{
		`ALERTS{alertname="TetherWebhookCertificateExpiring", namespace="tether-system"}`,
		`ALERTS{alertname="TetherNoSelectableBackend", namespace="llm", pool="batch"}`,
	} {
		testkit.Eventually(t, 30*time.Second, active, func() error {
			r, err := p.query(active, time.Now())
			if err == nil && len(r) == 0 {
				err = fmt.Errorf("not active")
			}
			return err
		})
	}
	// And one whose condition it does not meet stays quiet: the chat
	// pools have backends.
	if r, err := p.query(`ALERTS{alertname="TetherNoSelectableBackend", pool="chat"}`, time.Now()); err != nil || len(r) != 0 {
		t.Errorf("TetherNoSelectableBackend for pool chat: %v %v", r, err)
	}
	t.Logf("%d queries returned series after %s", len(qs), time.Since(start).Round(time.Second))

	if *pngDir != "" {
		renderPanels(t, p, s, start)
	}
}

// metricNames are the metric families the running code has registered:
// every sidecar's and the injector's registry, and modelsim's /metrics
// (standing in for vLLM's prefix-cache counters).
func (s *system) metricNames(t testing.TB) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	add := func(g prometheus.Gatherer) {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			names[mf.GetName()] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					names[mf.GetName()+suffix] = true
				}
			}
		}
	}
	for _, sc := range s.sidecars {
		add(sc.srv.Registry())
	}
	add(s.injector.reg)
	add(testkit.Scrape(t, s.sims[0].URL+"/metrics"))
	return names
}

// prom is a running prometheus and its HTTP API.
type prom struct {
	base    string
	targets int
}

type sample struct {
	labels map[string]string
	value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%g", s.labels, s.value) }

func startPrometheus(t *testing.T, bin string, s *system) *prom {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	type staticConfig struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	type job struct {
		Name    string         `json:"job_name"`
		Configs []staticConfig `json:"static_configs"`
	}
	var jobs []job
	targets := 0
	sidecars := job{Name: "tether-sidecar"}
	for _, sc := range s.sidecars {
		sidecars.Configs = append(sidecars.Configs, staticConfig{[]string{sc.srv.AdminAddr()}, map[string]string{"namespace": sc.namespace, "pod": sc.pod}})
		targets++
	}
	models := job{Name: "modelsim"}
	for i, m := range s.sims {
		models.Configs = append(models.Configs, staticConfig{[]string{hostPort(m)}, map[string]string{"namespace": routerNS, "pod": fmt.Sprintf("modelsim-%d", i)}})
		targets++
	}
	inj := job{Name: "tether-injector", Configs: []staticConfig{{[]string{s.injector.app.AdminAddr().String()}, map[string]string{"namespace": injectorNS, "pod": "tether-injector-0"}}}}
	targets++
	jobs = append(jobs, sidecars, models, inj)
	cfg, _ := json.Marshal(map[string]any{
		"global":         map[string]string{"scrape_interval": scrapeInterval.String(), "evaluation_interval": scrapeInterval.String()},
		"rule_files":     []string{rules},
		"scrape_configs": jobs,
	})
	cfgFile := filepath.Join(dir, "prometheus.yml") // JSON is YAML
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := cluster.FreeAddr(t, "127.0.0.1")
	cluster.StartProcess(t, "prometheus", bin, []string{
		"--config.file=" + cfgFile, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--log.level=warn",
	}, nil)
	p := &prom{base: "http://" + addr, targets: targets}
	testkit.Eventually(t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

var apiClient = &http.Client{Timeout: 10 * time.Second}

// api GETs path with params and decodes the data of a success answer.
func (p *prom) api(path string, params url.Values, data any) error {
	resp, err := apiClient.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %v", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// query evaluates expr at ts (an instant vector result).
func (p *prom) query(expr string, ts time.Time) ([]sample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	params := url.Values{"query": {expr}, "time": {strconv.FormatFloat(float64(ts.UnixMilli())/1000, 'f', 3, 64)}}
	if err := p.api("/api/v1/query", params, &data); err != nil {
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: result type %s, want vector", expr, data.ResultType)
	}
	out := make([]sample, 0, len(data.Result))
	for _, r := range data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(r.Value[1]), 64)
		out = append(out, sample{labels: r.Metric, value: v})
	}
	return out, nil
}

// series is one series of a range query.
type series struct {
	labels map[string]string
	t, v   []float64 // seconds since the start of the range; values
}

// queryRange evaluates expr from start to end every step.
func (p *prom) queryRange(expr string, start, end time.Time, step time.Duration) ([]series, error) {
	var data struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	sec := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
	params := url.Values{"query": {expr}, "start": {sec(start)}, "end": {sec(end)}, "step": {step.String()}}
	if err := p.api("/api/v1/query_range", params, &data); err != nil {
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	out := make([]series, 0, len(data.Result))
	for _, r := range data.Result {
		s := series{labels: r.Metric}
		for _, tv := range r.Values {
			ts, _ := tv[0].(float64)
			v, err := strconv.ParseFloat(fmt.Sprint(tv[1]), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			s.t = append(s.t, ts-float64(start.UnixMilli())/1000)
			s.v = append(s.v, v)
		}
		out = append(out, s)
	}
	return out, nil
}

// rulesHealthy reports an error unless every rule of the rules file is
// loaded and was last evaluated without error.
func (p *prom) rulesHealthy() error {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api("/api/v1/rules", nil, &data); err != nil {
		return err
	}
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				return fmt.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	if n != alertRules {
		return fmt.Errorf("%d rules loaded, want %d", n, alertRules)
	}
	return nil
}
