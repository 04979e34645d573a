package agent_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/nettest"
)

// One redaction rule everywhere, through the real agent: a pod whose HTTP probe path carries
// ?token= and ?access_token= (the target refuses, so Go's error quotes the
// URL) and whose exec probe prints an env value shows none of them in
// /pods, /events, /pods/{namespace}/{name}/probes or the agent's logs; nor
// does the logged error of a rejected manifest that quotes a credential
// (the agent's log handler applies the rule). The same holds
// for a probe of the probed.io/probes annotation (its httpGet query and
// header values), on /pods, /pods/{namespace}/{name}, the status page and
// the pod's page.
func TestAgent_SecretsRedactedInEveryOutput(t *testing.T) {
	closedPort := nettest.ClosedPort(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "leaky.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: leaky
  namespace: sec
  annotations:
    probed.io/probes: '[{"container":"side","type":"readiness","periodSeconds":1,"httpGet":{"path":"/ann?token=AGENT-TOKEN-6","port":%d,"httpHeaders":[{"name":"X-Auth","value":"AGENT-HEADER-7"}]}}]'
spec:
  containers:
  - name: app
    image: example/app
    env:
    - {name: DB_PASSWORD, value: AGENT-SECRET-1}
    readinessProbe:
      httpGet: {path: "/ready?token=AGENT-TOKEN-2&access_token=AGENT-TOKEN-3", port: %d}
      periodSeconds: 1
    livenessProbe:
      exec: {command: ["/bin/sh", "-c", "echo connecting with $(DB_PASSWORD); exit 1"]}
      periodSeconds: 1
      failureThreshold: 100
  - name: side
    image: example/side
`, closedPort, closedPort))
	// A manifest the agent rejects: its error (logged) quotes the value.
	writeFile(t, filepath.Join(dir, "rejected.yaml"), `apiVersion: v1
kind: Pod
metadata: {name: rejected, namespace: sec}
spec:
  containers:
  - name: app
    image: example/app
    readinessProbe:
      httpGet: {path: "/ready?token=AGENT-TOKEN-4", port: 8080}
      periodSeconds: "Authorization: Bearer AGENT-TOKEN-5"
`)
	r := startAgent(t, dir, func(o *agent.Options) { o.AllowHostExec = true })
	var hist struct {
		Probes []struct {
			Type    string `json:"type"`
			Results []struct {
				Message string `json:"message"`
			} `json:"results"`
		} `json:"probes"`
	}
	r.eventually("the pod", func() bool { _, ok := r.pods()["sec/leaky"]; return ok })
	r.eventually("both probes failed once", func() bool {
		r.get("/pods/sec/leaky/probes", &hist)
		n := 0
		for _, p := range hist.Probes {
			if len(p.Results) > 0 {
				n++
			}
		}
		return n == 3
	})
	r.eventually("the three Unhealthy events", func() bool { return len(r.events()) >= 3 })

	var outputs []string
	for _, path := range []string{"/pods", "/events", "/pods/sec/leaky/probes", "/pods/sec/leaky"} {
		var v any
		r.get(path, &v)
		b, _ := json.Marshal(v)
		outputs = append(outputs, string(b))
	}
	for _, path := range []string{"/", "/pod/sec/leaky"} {
		outputs = append(outputs, r.getPage(path))
	}
	r.stop()
	outputs = append(outputs, r.logs.String())
	all := strings.Join(outputs, "\n")
	for _, secret := range []string{"AGENT-SECRET-1", "AGENT-TOKEN-2", "AGENT-TOKEN-3", "AGENT-TOKEN-4", "AGENT-TOKEN-5",
		"AGENT-TOKEN-6", "AGENT-HEADER-7"} {
		if strings.Contains(all, secret) {
			t.Errorf("%s shown:\n%s", secret, all)
		}
	}
	for _, want := range []string{"connecting with REDACTED", "/ready?token=REDACTED\\u0026access_token=REDACTED",
		"/ann?token=REDACTED", "GET http://127.0.0.1:" + fmt.Sprint(closedPort) + "/ann?token=REDACTED"} {
		if !strings.Contains(all, want) {
			t.Errorf("%q missing:\n%s", want, all)
		}
	}
}
