package agent_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/internal/nettest"
)

func staleCondition(p v1.Pod) (v1.PodCondition, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == source.ConditionManifestStale {
			return c, true
		}
	}
	return v1.PodCondition{}, false
}

func (r *running) text(path string) string {
	r.t.Helper()
	resp, err := r.client.Get(r.base + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestAgent_BrokenManifestKeepsProbingStale: through the real
// agent and a real HTTP target, a probed pod whose file gets a typo keeps
// being probed at its last valid version (same UID, the target keeps
// getting requests, still Ready), GET /manifests shows the error with
// stale: true, GET /pods shows the probed.io/ManifestStale condition and
// /metrics probed_manifest_documents_rejected 1; fixing the file clears all
// of it (same spec: same pod, probes never stopped); deleting the file
// removes the pod.
func TestAgent_BrokenManifestKeepsProbingStale(t *testing.T) {
	tg := nettest.NewTarget(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	valid := webYAML(tg.Port, "/ready")
	writeFile(t, path, valid)
	r := startAgent(t, dir, nil)
	r.eventually("shop/web Ready", func() bool { p, ok := r.pods()["shop/web"]; return ok && podReady(p) })
	uid := r.pods()["shop/web"].UID

	writeFile(t, path, valid+"    readinesProbe: {}\n") // a typo: an unknown container field
	var rep source.Report
	r.eventually("the rejection in /manifests", func() bool {
		r.get("/manifests", &rep)
		return len(rep.Rejected) == 1
	})
	rej := rep.Rejected[0]
	if rep.Kind != "ManifestReport" || rep.Source != "directory" || rep.Path != dir || rep.Files != 1 ||
		rej.File != path || rej.Document != 1 || rej.Pod != "shop/web" || !rej.Stale || rej.Since.IsZero() ||
		!strings.Contains(rej.Error, `unknown field "readinesProbe" (did you mean "readinessProbe"?)`) {
		t.Fatalf("report %+v", rep)
	}
	hits := tg.Hits("/ready")
	r.eventually("probes going on while the file is broken", func() bool { return tg.Hits("/ready") >= hits+3 })
	p := r.pods()["shop/web"]
	c, ok := staleCondition(p)
	if p.UID != uid || !podReady(p) || !ok || c.Status != v1.ConditionTrue || c.Reason != "ManifestInvalid" ||
		!strings.Contains(c.Message, "readinesProbe") || !c.LastTransitionTime.Time.Equal(rej.Since) {
		t.Errorf("stale pod: uid %s (was %s), ready %v, condition %+v", p.UID, uid, podReady(p), c)
	}
	if m := r.text("/metrics"); !strings.Contains(m, "\nprobed_manifest_documents_rejected 1\n") {
		t.Errorf("/metrics lacks probed_manifest_documents_rejected 1")
	}

	writeFile(t, path, valid)
	r.eventually("stale cleared", func() bool {
		r.get("/manifests", &rep)
		_, stale := staleCondition(r.pods()["shop/web"])
		return len(rep.Rejected) == 0 && !stale
	})
	if p := r.pods()["shop/web"]; p.UID != uid || !podReady(p) {
		t.Errorf("fixed: uid %s (was %s), ready %v", p.UID, uid, podReady(p))
	}
	if m := r.text("/metrics"); !strings.Contains(m, "\nprobed_manifest_documents_rejected 0\n") {
		t.Errorf("/metrics lacks probed_manifest_documents_rejected 0")
	}

	writeFile(t, path, "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop\n") // broken again
	r.eventually("stale again", func() bool { _, stale := staleCondition(r.pods()["shop/web"]); return stale })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r.eventually("pod removed with its file", func() bool {
		r.get("/manifests", &rep)
		_, ok := r.pods()["shop/web"]
		return !ok && len(rep.Rejected) == 0
	})
	hits = tg.Hits("/ready")
	r.stop()
	if n := tg.Hits("/ready"); n > hits+1 {
		t.Errorf("probes went on after the pod was removed: %d more", n-hits)
	}
}

// TestAgent_ManifestsSkippedAndSingleFile: a directory with files that
// yield no pod lists them in GET /manifests with why; the agent also runs
// on a single manifest file.
func TestAgent_ManifestsSkippedAndSingleFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "empty.yaml"), "")
	writeFile(t, filepath.Join(dir, "secret.yaml"), "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
	r := startAgent(t, dir, nil)
	var rep source.Report
	// The API answers from the start; the report is the first scan's once
	// that has run.
	r.eventually("the first scan in /manifests", func() bool {
		r.get("/manifests", &rep)
		return rep.Files == 2
	})
	if len(rep.Skipped) != 2 || rep.Skipped[0].Document != 0 || rep.Skipped[1].Kind != "Secret" || rep.Skipped[1].Reason != "kind Secret holds no pod template" {
		t.Errorf("skipped %+v", rep.Skipped)
	}
	r.stop()

	port := nettest.AcceptAndClose(t)
	file := filepath.Join(t.TempDir(), "cache.json")
	writeFile(t, file, tcpJSON(port))
	r = startAgent(t, file, nil)
	r.eventually("default/cache Ready", func() bool { p, ok := r.pods()["default/cache"]; return ok && podReady(p) })
	r.get("/manifests", &rep)
	if rep.Path != file || rep.Files != 1 {
		t.Errorf("report %+v", rep)
	}
}
