package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// FuzzDecode: Decode never panics, every error is an *Error naming the
// source (and no "internal error", i.e. no recovered panic), and every entry
// is a defaulted, valid pod.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(realDir, "*.yaml"))
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		podYAML,
		podYAML + "---\n" + podYAML,
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec: {containers: [{name: c, livenessProbe: {grpc: {port: 1}}}]}\n",
		`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}]}}]}`,
		"---\n{apiVersion: \"v1\", kind: \"Pod\", metadata: {name: \"k\",}, spec: {containers: [{name: \"c\",}],},}\n",
		"apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers: [{name: c, startupProbe: {exec: {command: [x]}}}]\n",
		"a: &a [x, x]\nb: [*a, *a]\n",
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    probed.io/probes: '[{\"container\":\"c\",\"type\":\"liveness\",\"plugin\":{\"name\":\"k\",\"port\":\"http\"}}]'\nspec: {containers: [{name: c, ports: [{name: http, containerPort: 80}]}]}\n",
		"...\n---\n--- |\n  text\n",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, livenessProbe: {httpGet: {port: x}, gRPC: {}}}]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := DecodeAll(data, "fuzz.yaml", Options{MaxFileBytes: 1 << 20})
		for _, err := range r.Errors {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is %T", err, err)
			}
			if e.File != "fuzz.yaml" || !strings.HasPrefix(e.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", e)
			}
			if strings.Contains(e.Detail, "internal error") {
				t.Fatalf("recovered panic: %v", e)
			}
		}
		for _, e := range r.Entries {
			if e.Pod == nil || e.Source != "fuzz.yaml" || e.Doc < 1 {
				t.Fatalf("bad entry %+v", e)
			}
			if errs := ValidatePod(e.Pod); len(errs) != 0 {
				t.Fatalf("entry does not validate: %v", errs)
			}
			cs := append(append([]v1.Container(nil), e.Pod.Spec.InitContainers...), e.Pod.Spec.Containers...)
			for i := range cs {
				for _, pr := range containerProbes(&cs[i]) {
					if p := pr.probe; p != nil && (p.PeriodSeconds <= 0 || p.TimeoutSeconds <= 0 || p.SuccessThreshold <= 0 || p.FailureThreshold <= 0) {
						t.Fatalf("probe not defaulted: %+v", p)
					}
				}
			}
		}
	})
}
