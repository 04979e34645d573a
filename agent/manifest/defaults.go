package manifest

import (
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/probespec"
)

// SetDefaults applies to pod the defaults the API server applies to what the
// prober reads (spec 1.2; pkg/apis/core/v1/defaults.go), in place:
//   - pod spec.restartPolicy "" → Always;
//   - on every liveness, readiness and startup probe of the containers and
//     init containers: timeoutSeconds 0 → 1, periodSeconds 0 → 10,
//     successThreshold 0 → 1, failureThreshold 0 → 3 (initialDelaySeconds
//     stays 0); httpGet.path "" → "/", httpGet.scheme "" → HTTP;
//     grpc.service nil → "".
//
// Nothing else is defaulted. Ephemeral containers, which may not have
// probes, are left alone. A nil pod is a no-op.
func SetDefaults(pod *v1.Pod) {
	if pod == nil {
		return
	}
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			probespec.Default(c.LivenessProbe)
			probespec.Default(c.ReadinessProbe)
			probespec.Default(c.StartupProbe)
		}
	}
}
