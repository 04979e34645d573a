// Package monitoring checks the monitoring files under deploy/: the Prometheus
// alerting rules (promtool check rules, promtool test rules), the Grafana
// dashboard's shape and queries, and that every metric the dashboard and
// the rules reference is exported by a real agent (docs/operations.md,
// "Dashboards and alerts").
//
// Metric names are taken from PromQL with a small lexer (metricnames_test.go)
// rather than with github.com/prometheus/prometheus/promql/parser: that
// module would pull the Prometheus server's dependency tree into probed's
// go.mod for one test, and promtool (when installed) already checks the
// syntax of every expression.
package monitoring
