package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	rulesDir      = "../../deploy/prometheus"
	rulesFile     = rulesDir + "/probed-rules.yaml"
	dashboardFile = "../../deploy/grafana/probed.json"
	operationsDoc = "../../docs/operations.md"
)

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rf
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// query is a PromQL expression of the dashboard or the rules and where it is.
type query struct{ where, expr string }

// dashboardQueries are the panels' target expressions and the selectors of
// the label_values variable queries.
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var qs []query
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query: %v", v.Name, err)
		}
		m := labelValuesQuery.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
		}
		qs = append(qs, query{fmt.Sprintf("variable %s", v.Name), m[1]})
	}
	return qs
}

func ruleQueries(rf ruleFile) []query {
	var qs []query
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{fmt.Sprintf("rule %s/%s", g.Name, r.Alert+r.Record), r.Expr})
		}
	}
	return qs
}

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (Debian package prometheus)")
	}
	return p
}

func runPromtool(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestRulesPromtool checks the rules and runs their unit tests
// (probed-rules.test.yaml: every alert fires on its case and stays quiet on
// the others).
func TestRulesPromtool(t *testing.T) {
	bin := promtool(t)
	runPromtool(t, bin, rulesDir, "check", "rules", "probed-rules.yaml")
	runPromtool(t, bin, rulesDir, "test", "rules", "probed-rules.test.yaml")
}

// TestRulesTestCoversEveryAlert: each alert of the rules has a case in the
// promtool test file where it fires (non-empty exp_alerts) and one where it
// does not (exp_alerts: []).
func TestRulesTestCoversEveryAlert(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(rulesDir, "probed-rules.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &tf); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] {
				t.Errorf("alert %s: no promtool test case where it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("alert %s: no promtool test case where it does not fire", r.Alert)
			}
		}
	}
}

// grafanaIntervals are Grafana's interval variables, replaced by a
// duration; other variables sit in label matchers and become ".*".
var grafanaIntervals = regexp.MustCompile(`\$__(?:rate_interval|interval|range)\b|\$\{__(?:rate_interval|interval|range)\}`)

// TestDashboardQueriesPromtool checks the syntax of every dashboard query
// with promtool, as recording rules of a generated rule file.
func TestDashboardQueriesPromtool(t *testing.T) {
	bin := promtool(t)
	qs := dashboardQueries(t, loadDashboard(t))
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, q := range qs {
		e := grafanaIntervals.ReplaceAllString(q.expr, "5m")
		e = grafanaVariables.ReplaceAllString(e, ".*")
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: e})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-queries.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, dir, "check", "rules", "dashboard-queries.yaml")
}

// TestDashboardShape: a datasource variable that every panel and target
// uses, job/instance/namespace/pod variables, the panels the issue asks
// for, unique panel ids.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: datasource %+v, want ${datasource}", v.Name, v.Datasource)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query", "namespace": "query", "pod": "query"} {
		if vars[name] != typ {
			t.Errorf("variable %s: type %q, want %q", name, vars[name], typ)
		}
	}
	ids := map[int]bool{}
	titles := map[string]bool{}
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		titles[p.Title] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want ${datasource}", p.Title, p.Datasource)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %s: datasource %+v, want ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
			if strings.Contains(tg.Expr, "prober_probe_") && !strings.Contains(tg.Expr, `namespace=~"$namespace"`) {
				t.Errorf("panel %q target %s: prober metrics not filtered by $namespace: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	for _, want := range []string{"Probes/s by result", "Probe duration quantiles", "Scheduler lag (p50, p99) by lane",
		"Backlog by lane", "Pool busy / capacity by lane", "Plugin restarts", "Errored probes by reason", "Failing probes by pod"} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}
}

// TestMonitoringDocumented: docs/operations.md names every alert (with
// what to do) and every panel of the dashboard.
func TestMonitoringDocumented(t *testing.T) {
	data, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "\n## Dashboards and alerts\n")
	if i < 0 {
		t.Fatal("docs/operations.md has no \"## Dashboards and alerts\" section")
	}
	section := doc[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alert %s: needs summary and description annotations and a severity label", r.Alert)
			}
			if !strings.Contains(section, "#### "+r.Alert+"\n") {
				t.Errorf("alert %s: no \"#### %s\" heading in the Dashboards and alerts section", r.Alert, r.Alert)
			}
		}
	}
	for _, p := range loadDashboard(t).allPanels() {
		if p.Type != "row" && !strings.Contains(section, "**"+p.Title+"**") {
			t.Errorf("panel %q not described (as **%s**) in the Dashboards and alerts section", p.Title, p.Title)
		}
	}
}
