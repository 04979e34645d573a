package manifest

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/manager/probespec"
	"github.com/probed/probed/runtime"
)

// ValidatePod checks pod with the API server's rules for what the prober
// consumes (spec 1.3; pkg/apis/core/validation) and returns the violations
// with pod-relative field paths such as
// spec.containers[0].livenessProbe.httpGet.port. Call it on a defaulted pod
// (SetDefaults), as the API server does.
//
// Rules:
//   - metadata.name is required and a DNS-1123 subdomain; a set namespace is
//     a DNS-1123 label; annotation keys are qualified names and keys and
//     values together hold at most 256 KiB (apimachinery's
//     ValidateAnnotations, TotalAnnotationSizeLimitB, as the API server
//     checks every object's metadata); spec.restartPolicy is Always,
//     OnFailure or Never; spec.containers is not empty.
//   - Container names are required, DNS-1123 labels, and unique across
//     containers and init containers. Container ports are 1-65535; port
//     names are IANA_SVC_NAMEs, unique within the container.
//   - A probe has exactly one handler ("must specify a handler type" / "may
//     not specify more than 1 handler type"); its five int fields are >= 0;
//     successThreshold is 1 for liveness and startup; a set
//     terminationGracePeriodSeconds is > 0 and forbidden on readiness.
//   - Regular init containers may not have probes; restartable init
//     containers (restartPolicy: Always, "native sidecars") may.
//   - exec: command is required. httpGet: path is required, scheme is HTTP
//     or HTTPS, header names are valid HTTP tokens, port is 1-65535 or an
//     IANA_SVC_NAME, protocol (alpha, H2CContainerProbe) is HTTP1 or HTTP2,
//     and HTTP2 (h2c) may be used neither with scheme HTTPS nor with host
//     (BR-26). tcpSocket: port as for httpGet. grpc: port is 1-65535 (no
//     named ports).
//
// A named port the container does not declare is accepted, as the API server
// accepts it; Warnings reports it. Ephemeral containers are ignored.
// Lifecycle hooks are not validated: they are not probes.
func ValidatePod(pod *v1.Pod) field.ErrorList {
	var errs field.ErrorList
	if pod == nil {
		return field.ErrorList{field.Required(field.NewPath("spec"), "a pod is required")}
	}
	meta := field.NewPath("metadata")
	if pod.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "name is required"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(pod.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), pod.Name, msg))
		}
	}
	if pod.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(pod.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), pod.Namespace, msg))
		}
	}
	errs = append(errs, apivalidation.ValidateAnnotations(pod.Annotations, meta.Child("annotations"))...)
	spec := field.NewPath("spec")
	switch pod.Spec.RestartPolicy {
	case v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
	case "":
		errs = append(errs, field.Required(spec.Child("restartPolicy"), ""))
	default:
		errs = append(errs, field.NotSupported(spec.Child("restartPolicy"), pod.Spec.RestartPolicy,
			[]v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever}))
	}
	if len(pod.Spec.Containers) == 0 {
		errs = append(errs, field.Required(spec.Child("containers"), "a pod needs at least one container"))
	}
	names := map[string]bool{}
	for i := range pod.Spec.InitContainers {
		errs = append(errs, validateContainer(&pod.Spec.InitContainers[i], spec.Child("initContainers").Index(i), true, names)...)
	}
	for i := range pod.Spec.Containers {
		errs = append(errs, validateContainer(&pod.Spec.Containers[i], spec.Child("containers").Index(i), false, names)...)
	}
	return errs
}

func validateContainer(c *v1.Container, path *field.Path, init bool, names map[string]bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case c.Name == "":
		errs = append(errs, field.Required(path.Child("name"), ""))
	case names[c.Name]:
		errs = append(errs, field.Duplicate(path.Child("name"), c.Name))
	default:
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), c.Name, msg))
		}
	}
	names[c.Name] = true

	portNames := map[string]bool{}
	for i, p := range c.Ports {
		pp := path.Child("ports").Index(i)
		if p.Name != "" {
			msgs := validation.IsValidPortName(p.Name)
			for _, msg := range msgs {
				errs = append(errs, field.Invalid(pp.Child("name"), p.Name, msg))
			}
			if len(msgs) == 0 && portNames[p.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
			}
			portNames[p.Name] = true
		}
		if p.ContainerPort == 0 {
			errs = append(errs, field.Required(pp.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), p.ContainerPort, msg))
			}
		}
	}

	if init && !runtime.IsRestartable(c) {
		for _, pr := range containerProbes(c) {
			if pr.probe != nil {
				errs = append(errs, field.Forbidden(path.Child(pr.field), "may not be set for init containers without restartPolicy=Always"))
			}
		}
		return errs
	}
	for _, pr := range containerProbes(c) {
		errs = append(errs, probespec.Validate(pr.probe, pr.t, path.Child(pr.field))...)
	}
	return errs
}

type namedProbe struct {
	field string
	t     runtime.ProbeType
	probe *v1.Probe
}

// containerProbes lists c's three probe fields in a fixed order.
func containerProbes(c *v1.Container) [3]namedProbe {
	return [3]namedProbe{
		{"livenessProbe", runtime.Liveness, c.LivenessProbe},
		{"readinessProbe", runtime.Readiness, c.ReadinessProbe},
		{"startupProbe", runtime.Startup, c.StartupProbe},
	}
}

// warning is a finding that does not stop a pod from loading.
type warning struct {
	container string
	field     string // pod-relative
	msg       string
}

// Warnings returns what is accepted but will not work as written, each
// naming the container and the pod-relative field:
//   - an httpGet or tcpSocket port name the container does not declare: the
//     API server accepts it, and the kubelet reports every run of the probe
//     as errored (`port "x" not found`, spec 1.4, BR-20);
//   - a probe value that looks like an unfilled template placeholder
//     (__NAME__ or {{ ... }}) in httpGet host, path or header values, exec
//     command or grpc service.
//
// It expects a pod that passed ValidatePod.
func Warnings(pod *v1.Pod) []string {
	var out []string
	for _, w := range podWarnings(pod) {
		out = append(out, formatWarning(w, w.field))
	}
	return out
}

func formatWarning(w warning, path string) string {
	return fmt.Sprintf("container %s: %s: %s", strconv.Quote(w.container), path, w.msg)
}

func podWarnings(pod *v1.Pod) []warning {
	if pod == nil {
		return nil
	}
	var out []warning
	spec := field.NewPath("spec")
	check := func(c *v1.Container, path *field.Path) {
		for _, pr := range containerProbes(c) {
			if pr.probe == nil {
				continue
			}
			pp := path.Child(pr.field)
			var port *intstr.IntOrString
			var portPath *field.Path
			switch {
			case pr.probe.HTTPGet != nil:
				port, portPath = &pr.probe.HTTPGet.Port, pp.Child("httpGet", "port")
			case pr.probe.TCPSocket != nil:
				port, portPath = &pr.probe.TCPSocket.Port, pp.Child("tcpSocket", "port")
			}
			if port != nil && port.Type == intstr.String {
				if _, err := runtime.ResolvePort(*port, c); err != nil {
					out = append(out, warning{c.Name, portPath.String(),
						fmt.Sprintf("port %q is not among the container's ports; the kubelet reports every run of this probe as errored (%v)", port.StrVal, err)})
				}
			}
			for _, v := range probeStrings(pr.probe, pp) {
				if m := placeholder.FindString(v.value); m != "" {
					out = append(out, warning{c.Name, v.path, fmt.Sprintf("%q looks like an unfilled template placeholder (%s)", v.value, m)})
				}
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; runtime.IsRestartable(c) {
			check(c, spec.Child("initContainers").Index(i))
		}
	}
	for i := range pod.Spec.Containers {
		check(&pod.Spec.Containers[i], spec.Child("containers").Index(i))
	}
	return out
}

type pathValue struct {
	path, value string
}

// probeStrings lists the free-text values of a probe's handler.
func probeStrings(p *v1.Probe, path *field.Path) []pathValue {
	var out []pathValue
	if e := p.Exec; e != nil {
		for i, s := range e.Command {
			out = append(out, pathValue{path.Child("exec", "command").Index(i).String(), s})
		}
	}
	if g := p.HTTPGet; g != nil {
		hp := path.Child("httpGet")
		out = append(out, pathValue{hp.Child("host").String(), g.Host}, pathValue{hp.Child("path").String(), g.Path})
		for i, h := range g.HTTPHeaders {
			out = append(out, pathValue{hp.Child("httpHeaders").Index(i).Child("value").String(), h.Value})
		}
	}
	if t := p.TCPSocket; t != nil {
		out = append(out, pathValue{path.Child("tcpSocket", "host").String(), t.Host})
	}
	if g := p.GRPC; g != nil && g.Service != nil {
		out = append(out, pathValue{path.Child("grpc", "service").String(), *g.Service})
	}
	return out
}
