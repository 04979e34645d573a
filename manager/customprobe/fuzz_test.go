package customprobe

import (
	"strings"
	"testing"
)

// FuzzParseAnnotation: Parse never panics; every returned probe names a
// container of the pod, a plugin kind and defaulted timing; every error's
// path is inside the annotation.
func FuzzParseAnnotation(f *testing.F) {
	for _, s := range []string{
		`[{"container":"app","type":"readiness","periodSeconds":1,"plugin":{"name":"http-match","port":8080,"params":{"path":"/ready","body":"ok"}}}]`,
		`[{"container":"proxy","type":"startup","failureThreshold":600,"plugin":{"name":"k","port":"http"}}]`,
		`[{"container":"worker","type":"liveness","terminationGracePeriodSeconds":5,"plugin":{"name":"k","params":{}}},{"container":"app","type":"liveness","plugin":{"name":"k"}}]`,
		`[{"container":"app","type":"liveness","successThreshold":2,"plugin":{"name":"k","params":{"a":1}}}]`,
		`[{"container":"app","container":"x","type":"x","plugin":null}]`,
		`[]`, `null`, ``, `{}`, `[1,"a",null,[]]`, `[{"plugin":{"port":-1}}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		pod := testPod(value)
		probes, errs := Parse(pod, func(k string) bool { return k != "unknown" })
		for _, e := range errs {
			if !strings.HasPrefix(e.Field, "metadata.annotations[probed.io/probes]") {
				t.Fatalf("error outside the annotation: %v", e)
			}
		}
		for _, p := range probes {
			found := false
			for _, c := range append(pod.Spec.Containers, pod.Spec.InitContainers...) {
				found = found || c.Name == p.Container
			}
			if !found || p.Container == "setup" {
				t.Fatalf("probe for container %q", p.Container)
			}
			if p.Plugin.Name == "" || p.Plugin.Name == "unknown" {
				t.Fatalf("plugin %+v", p.Plugin)
			}
			q := p.Probe
			if q.PeriodSeconds <= 0 || q.TimeoutSeconds <= 0 || q.SuccessThreshold <= 0 || q.FailureThreshold <= 0 || q.InitialDelaySeconds < 0 {
				t.Fatalf("timing %+v", q)
			}
			if q.Exec != nil || q.HTTPGet != nil || q.TCPSocket != nil || q.GRPC != nil {
				t.Fatalf("handler set: %+v", q)
			}
		}
	})
}
