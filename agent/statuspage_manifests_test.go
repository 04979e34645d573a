package agent_test

import (
	"html"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/internal/nettest"
)

// TestAgent_PageListsRejectedManifests: the status
// page lists GET /manifests' rejected documents (file, document, pod, the
// error, stale while the last valid version is probed), and no longer once
// the file is fixed.
func TestAgent_PageListsRejectedManifests(t *testing.T) {
	tg := nettest.NewTarget(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	valid := webYAML(tg.Port, "/ready")
	writeFile(t, path, valid)
	r := startAgent(t, dir, nil)
	r.eventually("shop/web Ready", func() bool { p, ok := r.pods()["shop/web"]; return ok && podReady(p) })
	if page := r.getPage("/"); !strings.Contains(page, "None: every manifest document was accepted.") {
		t.Errorf("the page's rejected manifests section is not empty")
	}

	writeFile(t, path, valid+"    readinesProbe: {}\n")
	var rep source.Report
	r.eventually("the rejection in /manifests", func() bool {
		r.get("/manifests", &rep)
		return len(rep.Rejected) == 1
	})
	page := r.getPage("/")
	for _, want := range []string{`<tr class="rejected"><td><code>` + html.EscapeString(path) + `</code></td><td>1</td>`,
		html.EscapeString(rep.Rejected[0].Error), "<td>shop/web</td>", "last valid version, stale", `href="/manifests"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page misses %q", want)
		}
	}

	writeFile(t, path, valid)
	r.eventually("the rejection gone from the page", func() bool {
		return strings.Contains(r.getPage("/"), "None: every manifest document was accepted.")
	})
}
