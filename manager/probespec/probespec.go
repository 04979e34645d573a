// Package probespec holds the API server's rules for a v1.Probe, which
// probed applies to every probe it reads: the defaults (Default,
// DefaultTiming; spec 1.2, pkg/apis/core/v1/defaults.go) and the
// validation (Validate, ValidateHandler, ValidateTiming; spec 1.3,
// pkg/apis/core/validation validateProbe). A manifest's spec probes
// (agent/manifest), the probed.io/probes annotation's and the offloaded
// record's (manager/customprobe) and the offload webhook's moved probes
// (agent/kube/offload) all go through them, so the v1.Probe rules stand
// alone, apart from the annotation's format and cluster mode's limits.
package probespec

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/probed/probed/runtime"
)

// Default applies the API server's defaults to a whole probe, in place (spec
// 1.2; pkg/apis/core/v1/defaults.go): DefaultTiming, then httpGet.path "" →
// "/", httpGet.scheme "" → HTTP and grpc.service nil → "". It is the one
// defaulting rule for spec probes (package manifest) and annotation probes.
// p may be nil.
func Default(p *v1.Probe) {
	if p == nil {
		return
	}
	DefaultTiming(p)
	if g := p.HTTPGet; g != nil {
		if g.Path == "" {
			g.Path = "/"
		}
		if g.Scheme == "" {
			g.Scheme = v1.URISchemeHTTP
		}
	}
	if g := p.GRPC; g != nil && g.Service == nil {
		empty := ""
		g.Service = &empty
	}
}

// Validate checks a defaulted probe of type t as the API server does (spec
// 1.3; pkg/apis/core/validation validateProbe): exactly one handler, the
// handler's own rules (ValidateHandler) and the timing rules
// (ValidateTiming). fldPath is the probe's path; errors name the offending
// child field. A nil p has no errors.
func Validate(p *v1.Probe, t runtime.ProbeType, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	errs := ValidateHandler(&p.ProbeHandler, fldPath)
	return append(errs, ValidateTiming(p, t, fldPath)...)
}

// ValidateHandler checks that exactly one handler is set and validates it,
// in the API server's order (exec, httpGet, tcpSocket, grpc): an exec
// command is required; an httpGet path is required, its port a number
// 1-65535 or an IANA_SVC_NAME, its scheme HTTP or HTTPS, header names valid
// HTTP header names, protocol HTTP/1.1 or HTTP/2 (cleartext only, to the pod
// itself: BR-26); a tcpSocket port as for httpGet; a grpc port a number
// 1-65535.
func ValidateHandler(h *v1.ProbeHandler, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	more := func(name string) bool {
		if n > 0 {
			errs = append(errs, field.Forbidden(path.Child(name), "may not specify more than 1 handler type"))
			return true
		}
		n++
		return false
	}
	if h.Exec != nil && !more("exec") {
		if len(h.Exec.Command) == 0 {
			errs = append(errs, field.Required(path.Child("exec", "command"), ""))
		}
	}
	if h.HTTPGet != nil && !more("httpGet") {
		errs = append(errs, validateHTTPGet(h.HTTPGet, path.Child("httpGet"))...)
	}
	if h.TCPSocket != nil && !more("tcpSocket") {
		errs = append(errs, validatePortNumOrName(h.TCPSocket.Port, path.Child("tcpSocket", "port"))...)
	}
	if h.GRPC != nil && !more("grpc") {
		for _, msg := range validation.IsValidPortNum(int(h.GRPC.Port)) {
			errs = append(errs, field.Invalid(path.Child("grpc", "port"), h.GRPC.Port, msg))
		}
	}
	if n == 0 {
		errs = append(errs, field.Required(path, "must specify a handler type"))
	}
	return errs
}

func validateHTTPGet(g *v1.HTTPGetAction, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if g.Path == "" {
		errs = append(errs, field.Required(path.Child("path"), ""))
	}
	errs = append(errs, validatePortNumOrName(g.Port, path.Child("port"))...)
	if g.Scheme != v1.URISchemeHTTP && g.Scheme != v1.URISchemeHTTPS {
		errs = append(errs, field.NotSupported(path.Child("scheme"), g.Scheme, []v1.URIScheme{v1.URISchemeHTTP, v1.URISchemeHTTPS}))
	}
	for i, h := range g.HTTPHeaders {
		for _, msg := range validation.IsHTTPHeaderName(h.Name) {
			errs = append(errs, field.Invalid(path.Child("httpHeaders").Index(i).Child("name"), h.Name, msg))
		}
	}
	if g.Protocol != nil {
		switch *g.Protocol {
		case v1.HTTPProtocolHTTP1:
		case v1.HTTPProtocolHTTP2:
			// BR-26: h2c is cleartext HTTP/2 to the pod itself.
			if g.Scheme == v1.URISchemeHTTPS {
				errs = append(errs, field.Invalid(path.Child("protocol"), string(*g.Protocol), "may not be used with scheme HTTPS"))
			}
			if g.Host != "" {
				errs = append(errs, field.Invalid(path.Child("protocol"), string(*g.Protocol), "may not be used with host"))
			}
		default:
			errs = append(errs, field.NotSupported(path.Child("protocol"), *g.Protocol, []v1.HTTPProtocol{v1.HTTPProtocolHTTP1, v1.HTTPProtocolHTTP2}))
		}
	}
	return errs
}

// validatePortNumOrName is the API server's rule for httpGet and tcpSocket
// ports: a number 1-65535 or an IANA_SVC_NAME.
func validatePortNumOrName(p intstr.IntOrString, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch p.Type {
	case intstr.Int:
		for _, msg := range validation.IsValidPortNum(int(p.IntVal)) {
			errs = append(errs, field.Invalid(path, p.IntVal, msg))
		}
	case intstr.String:
		for _, msg := range validation.IsValidPortName(p.StrVal) {
			errs = append(errs, field.Invalid(path, p.StrVal, msg))
		}
	default:
		errs = append(errs, field.InternalError(path, fmt.Errorf("unknown type: %v", p.Type)))
	}
	return errs
}

// DefaultTiming applies the API server's defaults to the timing fields of p
// (spec 1.2, pkg/apis/core/v1/defaults.go): a zero timeoutSeconds becomes 1,
// periodSeconds 10, successThreshold 1 and failureThreshold 3 (all seconds or
// counts). initialDelaySeconds stays 0 and terminationGracePeriodSeconds stays
// nil. Negative values are left alone for validation to reject. The handler
// fields are not touched. p may be nil.
func DefaultTiming(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
}

// ValidateTiming checks the timing fields of a (defaulted) probe of type t
// with the API server's rules (spec 1.3, pkg/apis/core/validation
// validateProbe and validateContainers):
//   - initialDelaySeconds, timeoutSeconds, periodSeconds, successThreshold and
//     failureThreshold must be >= 0 ("must be greater than or equal to 0");
//   - successThreshold must be 1 for liveness and startup probes ("must be 1");
//   - terminationGracePeriodSeconds, when set, must be > 0 and is forbidden on
//     readiness probes ("must not be set for readinessProbes").
//
// fldPath is the probe's path (e.g. spec.containers[0].livenessProbe); the
// errors name the offending child field. A nil p has no errors.
func ValidateTiming(p *v1.Probe, t runtime.ProbeType, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p == nil {
		return errs
	}
	nonNegative := func(v int64, name string) {
		if v < 0 {
			errs = append(errs, field.Invalid(fldPath.Child(name), v, "must be greater than or equal to 0"))
		}
	}
	nonNegative(int64(p.InitialDelaySeconds), "initialDelaySeconds")
	nonNegative(int64(p.TimeoutSeconds), "timeoutSeconds")
	nonNegative(int64(p.PeriodSeconds), "periodSeconds")
	nonNegative(int64(p.SuccessThreshold), "successThreshold")
	nonNegative(int64(p.FailureThreshold), "failureThreshold")
	if g := p.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	switch t {
	case runtime.Liveness, runtime.Startup:
		if p.SuccessThreshold != 1 {
			errs = append(errs, field.Invalid(fldPath.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
		}
	case runtime.Readiness:
		if p.TerminationGracePeriodSeconds != nil {
			errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *p.TerminationGracePeriodSeconds, "must not be set for readinessProbes"))
		}
	}
	return errs
}
