package output_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/probed/probed/agent/output"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]output.Format{"": output.Table, "table": output.Table, "wide": output.Wide, "json": output.JSON, "yaml": output.YAML} {
		if got, err := output.Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"xml", "JSON", "jsonpath={.pods}", "name"} {
		_, err := output.Parse(in)
		if err == nil || err.Error() != `-o/--output "`+in+`": want table, wide, json or yaml` {
			t.Errorf("Parse(%q): %v, want an error naming the flag and the formats", in, err)
		}
	}
}

type doc struct {
	Name    string            `json:"name"`
	Count   int               `json:"count"`
	Empty   []string          `json:"empty"`
	Omitted string            `json:"omitted,omitempty"`
	Labels  map[string]string `json:"labels"`
}

// TestWriteJSONAndYAMLAgree: both formats come from the JSON tags (YAML
// keys are the JSON names, omitempty holds in both, [] stays a list), and
// a value with control characters and HTML survives both unharmed and
// escaped (no raw ESC reaches a terminal that cats the document).
func TestWriteJSONAndYAMLAgree(t *testing.T) {
	in := doc{Name: "a\x1b[2J<script>\"x\"\n", Count: 3, Empty: []string{}, Labels: map[string]string{"app": "web"}}
	var j, y bytes.Buffer
	if err := output.Write(&j, output.JSON, in); err != nil {
		t.Fatal(err)
	}
	if err := output.Write(&y, output.YAML, in); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]string{"json": j.String(), "yaml": y.String()} {
		if strings.ContainsRune(b, '\x1b') {
			t.Errorf("%s holds a raw ESC:\n%q", name, b)
		}
		if strings.Contains(b, "omitted") {
			t.Errorf("%s holds an omitempty field:\n%s", name, b)
		}
	}
	if !strings.Contains(y.String(), "empty: []\n") || !strings.Contains(j.String(), "\n  \"empty\": [],\n") {
		t.Errorf("empty list not [] in both:\n%s\n%s", j.String(), y.String())
	}
	var fromJSON, fromYAML doc
	if err := json.Unmarshal(j.Bytes(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(y.Bytes(), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if fromJSON.Name != in.Name || fromYAML.Name != in.Name || fromJSON.Count != 3 || fromYAML.Count != 3 || fromYAML.Labels["app"] != "web" {
		t.Errorf("round trip: json %+v yaml %+v, want %+v", fromJSON, fromYAML, in)
	}
	if err := output.Write(&j, output.Wide, in); err == nil {
		t.Error("Write(wide): no error")
	}
}

// TestPrintable: the one escaping rule of `probed status` and the status
// page: non-printable characters are escaped as strconv.Quote escapes them,
// without quotes; invalid UTF-8 shows as U+FFFD; clean text is unchanged.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode ✓":        "plain text, ünïcode ✓",
		"a\x1b[2Jb":                    `a\x1b[2Jb`,
		"\x1b]0;title\a":               `\x1b]0;title\a`,
		"cr\rlf\ntab\tdel\x7f":         `cr\rlf\ntab\tdel\x7f`,
		"c1 \u009b31m bidi \u202eevil": `c1 \u009b31m bidi \u202eevil`,
		"bad \xff byte":                "bad \uFFFD byte",
	} {
		if got := output.Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
