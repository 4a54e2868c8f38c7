// Package observe checks the observability that ships with the chart
// against the code and a real Prometheus: the Grafana dashboard
// (charts/tether/dashboards) and the alert rules (charts/tether/alerts).
//
// Its tests parse every PromQL expression with Prometheus' own parser and
// check each metric name against the registries of running sidecars and an
// injector; then a real prometheus (Debian's package) scrapes those, their
// modelsim backends and the injector under load, loads the rules, and every
// dashboard and alert expression is evaluated through its HTTP API and must
// return series. With -png DIR the same run renders the dashboard's main
// panels as PNG (make dashboard-png writes the README's images).
package observe
