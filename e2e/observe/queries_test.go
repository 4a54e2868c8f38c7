package observe_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// alertRules is how many alerts the rules file holds: the observability
// issue's six, TetherLogLinesDropped (added with the log's drops) and
// TetherBackendStreamsStalled (with the stream idle timeout).
const alertRules = 8

// The chart's files, from this package's directory.
var (
	dashboardFile = filepath.Join("..", "..", "charts", "tether", "dashboards", "tether.json")
	rulesFile     = filepath.Join("..", "..", "charts", "tether", "alerts", "tether.rules.yaml")
)

// query is one PromQL expression of the dashboard or the rules.
type query struct {
	where string // "panel <title>" or "alert <name>"
	title string // the panel's title (dashboard only)
	expr  string // as written, Grafana variables included
	alert bool
}

type dashboard struct {
	Panels []struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadDashboard(t testing.TB) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// queries returns every expression of the dashboard and the rules.
func queries(t testing.TB) []query {
	t.Helper()
	var qs []query
	for _, p := range loadDashboard(t).Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, query{where: "panel " + p.Title, title: p.Title, expr: tg.Expr})
		}
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{where: "alert " + r.Alert, expr: r.Expr, alert: true})
		}
	}
	if len(qs) == 0 {
		t.Fatal("no queries found")
	}
	return qs
}

// promql is Prometheus' parser with its default options: no
// experimental syntax, as a stock Prometheus accepts.
var promql = parser.NewParser(parser.Options{})

// readmeQueries are the PromQL expressions of the README's table "The
// five queries to run first" (the backticked parts of its second column
// that call something), so that the README cannot drift from the code.
func readmeQueries(t testing.TB) []query {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const heading = "### The five queries to run first\n"
	_, section, ok := strings.Cut(string(b), heading)
	if !ok {
		t.Fatalf("README has no %q", strings.TrimSpace(heading))
	}
	section, _, _ = strings.Cut(section, "\n#")
	var qs []query
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 || cells[0] == "| what" {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			if strings.Contains(m[1], "(") {
				qs = append(qs, query{where: "README " + strings.TrimPrefix(cells[0], "| "), expr: m[1]})
			}
		}
	}
	if len(qs) < 5 {
		t.Fatalf("README's five queries: found %d expressions", len(qs))
	}
	return qs
}

var backticked = regexp.MustCompile("`([^`]+)`")

// expand replaces the dashboard's Grafana variables with what Grafana
// sends for "All" and a rate window: $namespace and $pool match
// everything (their allValue), $__rate_interval is window.
func expand(expr string, window time.Duration) string {
	return strings.NewReplacer(
		"$__rate_interval", window.String(),
		"$namespace", ".*",
		"$pool", ".*",
	).Replace(expr)
}

// metricNames are the metric names an expression selects, in order of
// appearance, without duplicates.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
		return nil
	})
	return names
}

// signals splits an alert expression into the parts that must return
// series while the system runs, healthy or not: comparisons against a
// number are dropped (a healthy system fails the threshold), the operands
// of set operators (or, and, unless) and of vector comparisons are kept.
func signals(expr parser.Expr) []parser.Expr {
	switch e := expr.(type) {
	case *parser.ParenExpr:
		return signals(e.Expr)
	case *parser.BinaryExpr:
		if e.Op.IsSetOperator() {
			return append(signals(e.LHS), signals(e.RHS)...)
		}
		if e.Op.IsComparisonOperator() {
			var out []parser.Expr
			for _, side := range []parser.Expr{e.LHS, e.RHS} {
				if side.Type() == parser.ValueTypeVector {
					out = append(out, signals(side)...)
				}
			}
			return out
		}
	}
	return []parser.Expr{expr}
}

// TestQueriesParse parses every expression with Prometheus' parser and
// checks that every metric name is one of tether's or a model server's
// prefix-cache counters (the registries themselves are checked against a
// running system in TestAgainstPrometheus).
func TestQueriesParse(t *testing.T) {
	qs := append(queries(t), readmeQueries(t)...)
	panels, alerts := 0, 0
	for _, q := range qs {
		e, err := promql.ParseExpr(expand(q.expr, time.Minute))
		if err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
			continue
		}
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "tether_") && !strings.HasPrefix(n, "vllm:prefix_cache_") {
				t.Errorf("%s: metric %q is neither tether's nor vLLM's prefix-cache counter", q.where, n)
			}
		}
		if q.alert {
			alerts++
			if len(signals(e)) == 0 {
				t.Errorf("%s: no signal to evaluate in %q", q.where, q.expr)
			}
		} else if strings.HasPrefix(q.where, "panel ") {
			panels++
		}
	}
	if alerts != alertRules {
		t.Errorf("%d alerts, want %d: the issue's six, TetherLogLinesDropped and TetherBackendStreamsStalled", alerts, alertRules)
	}
	t.Logf("%d dashboard queries and %d alert expressions parsed", panels, alerts)
}

// TestSignals pins how alert expressions are split for evaluation.
func TestSignals(t *testing.T) {
	for expr, want := range map[string][]string{
		`a == 1`:                   {`a`},
		`min(a) < count(a)`:        {`min(a)`, `count(a)`},
		`(sum(a) == 0) or (b > 0)`: {`sum(a)`, `b`},
		`sum(rate(a[5m])) / sum(rate(b[5m])) > 0.1`: {`sum(rate(a[5m])) / sum(rate(b[5m]))`},
		`min(a) - time() < 14 * 86400`:              {`min(a) - time()`},
	} {
		e, err := promql.ParseExpr(expr)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range signals(e) {
			got = append(got, s.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("signals(%s) = %q, want %q", expr, got, want)
		}
	}
}

// TestDashboardShape checks what Grafana needs to import the dashboard
// anywhere: every query on the ${datasource} variable, panel ids unique,
// panels within the 24-column grid without overlapping.
func TestDashboardShape(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" {
		t.Error("no uid: every import would create another copy")
	}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
			t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
	}
}

// TestAlertsShape: every alert names itself Tether*, waits (for) before
// firing, has a severity routing understands and says what happened and
// what to look at.
func TestAlertsShape(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if !strings.HasPrefix(r.Alert, "Tether") || r.For == "" ||
				(r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical") ||
				r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %q: want a Tether name, for, severity warning|critical, summary and description: %+v", r.Alert, r)
			}
		}
	}
}
