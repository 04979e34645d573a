package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRunRequirePluginPin: through the real binary, with `probed plugin
// serve tcp` as the plugin. Unpinned and without
// --require-plugin-pin it runs, and one warning names it; with the flag the
// agent refuses to start, naming the plugin and its binary's sha256; pinned
// with the flag it runs and nothing is said about unpinned plugins.
func TestRunRequirePluginPin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), fmt.Sprintf(plainPod, "good"))
	data, err := os.ReadFile(checkBin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	pin := hex.EncodeToString(sum[:])
	config := func(sha string) string {
		path := filepath.Join(t.TempDir(), "plugins.yaml")
		entry := map[string]any{"name": "tcp", "path": checkBin, "args": []string{"plugin", "serve", "tcp"}}
		if sha != "" {
			entry["sha256"] = sha
		}
		b, _ := json.Marshal(map[string]any{"plugins": []any{entry}})
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	run := func(cfg string, extra ...string) (string, int) {
		listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
		args := append([]string{"run", "--manifests", dir, "--listen", listen, "--log-format", "json", "--for", "2s", "--plugin-config", cfg}, extra...)
		_, stderr, code := runProbed(t, nil, args...)
		return stderr, code
	}
	unpinnedLine := func(stderr string) string {
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, "plugins run unpinned") {
				return line
			}
		}
		return ""
	}

	stderr, code := run(config(""))
	if code != 0 {
		t.Fatalf("unpinned, no flag: exit %d\n%s", code, tail(stderr, 20))
	}
	if l := unpinnedLine(stderr); !strings.Contains(l, `"level":"WARN"`) || !strings.Contains(l, `"plugins":["tcp"]`) {
		t.Errorf("unpinned plugin: warning line %q, want WARN naming [tcp]\n%s", l, tail(stderr, 20))
	}

	stderr, code = run(config(""), "--require-plugin-pin")
	want := `plugin "tcp" (` + checkBin + `) has no sha256 pin and pins are required (RequirePin, --require-plugin-pin); its sha256 is ` + pin
	if code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("unpinned with --require-plugin-pin: exit %d, want non-zero and %q in:\n%s", code, want, tail(stderr, 20))
	}

	stderr, code = run(config(pin), "--require-plugin-pin")
	if code != 0 {
		t.Fatalf("pinned with --require-plugin-pin: exit %d\n%s", code, tail(stderr, 20))
	}
	if l := unpinnedLine(stderr); l != "" {
		t.Errorf("pinned plugin reported unpinned: %s", l)
	}
}
