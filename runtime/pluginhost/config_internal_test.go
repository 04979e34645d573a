package pluginhost

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `
plugins:
- name: http-match
  path: bin/http-match
  sha256: `+strings.Repeat("0a", 32)+`
  maxInFlight: 8
  args: [--x]
  env: {A: b}
  config: {k: v}
  params:
    http-match:
      path: {required: true, pattern: "^/"}
- name: redis
`)
	c, err := LoadConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Plugins[0]
	if p.Name != "http-match" || p.MaxInFlight != 8 || p.Args[0] != "--x" || p.Env["A"] != "b" || p.Config["k"] != "v" ||
		!p.Params["http-match"]["path"].Required || p.Params["http-match"]["path"].Pattern != "^/" {
		t.Errorf("decoded %+v", p)
	}
	bad := []struct{ data, want string }{
		{"plugins:\n- name: a\n  pth: x\n", `unknown field "pth"`},
		{"plugins:\n- path: x\n", "name is required"},
		{"plugins:\n- name: a\n- name: a\n", `name "a" is used twice`},
		{"plugins:\n- name: a b\n", "invalid name"},
		{"plugins:\n- name: a\n  sha256: abc\n", "not a hex SHA-256"},
		{"plugins:\n- name: a\n  maxInFlight: -1\n", "maxInFlight must be >= 0"},
		{"plugins:\n- name: a\n  env: {\"X=Y\": z}\n", "invalid variable name"},
		{"plugins:\n- name: a\n  params: {k: {probed.io/spec: {}}}\n", "invalid parameter name"},
		{"plugins:\n- name: a\n  params: {k: {p: {pattern: \"(\"}}}\n", "pattern"},
	}
	for i, b := range bad {
		_, err := LoadConfig(write("bad"+string(rune('a'+i))+".yaml", b.data))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%q: %v, want %q", b.data, err, b.want)
		}
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestPlan(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"alpha": 0o755, "beta": 0o755, "notes.txt": 0o644, ".hidden": 0o755} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := plan(dir, "/etc/probed", []PluginConfig{
		{Name: "beta", SHA256: "x"},                // configures the directory's binary
		{Name: "gamma", Path: "gamma-bin"},         // relative to the directory
		{Name: "delta", Path: "/opt/delta/plugin"}, // absolute
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"alpha": filepath.Join(dir, "alpha"), "beta": filepath.Join(dir, "beta"),
		"gamma": filepath.Join(dir, "gamma-bin"), "delta": "/opt/delta/plugin",
	}
	if len(got) != len(want) {
		t.Fatalf("plan: %+v", got)
	}
	for _, p := range got {
		if want[p.Name] != p.Path {
			t.Errorf("%s: path %s, want %s", p.Name, p.Path, want[p.Name])
		}
		if p.Name == "beta" && p.SHA256 != "x" {
			t.Error("configured fields of a directory plugin lost")
		}
	}
	// Without a directory, relative paths are relative to the config file.
	got, err = plan("", "/etc/probed", []PluginConfig{{Name: "a", Path: "plugins/a"}})
	if err != nil || got[0].Path != "/etc/probed/plugins/a" {
		t.Errorf("relative to the config: %+v, %v", got, err)
	}
	if _, err := plan("", "", []PluginConfig{{Name: "a"}}); err == nil || !strings.Contains(err.Error(), "no path and no plugin directory") {
		t.Errorf("no path: %v", err)
	}
	if _, err := plan(filepath.Join(dir, "missing"), "", nil); err == nil {
		t.Error("missing directory: no error")
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for n, w := range want {
		if d := b.delay(n); d != w {
			t.Errorf("delay(%d) = %s, want %s", n, d, w)
		}
	}
}

func TestHCLogAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), "")
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("levels: debug %v info %v level %v", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
	l.Named("plug").With("k", "v").Warn("hello", "a", 1)
	l.Debug("hidden")
	l.StandardLogger(nil).Print("std line")
	out := buf.String()
	for _, want := range []string{"level=WARN", "msg=hello", "logger=plug", "k=v", "a=1", "msg=\"std line\""} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing in %q", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Error("debug line logged at info")
	}
}
