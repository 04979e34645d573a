package exec

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ExpandCommand expands $(VAR) references in every argument of cmd the way
// the kubelet expands an exec probe's command (spec E1, observed on v1.37.2):
//
//   - the variables are the container's declared env names; a name declared
//     with a literal value expands to that value verbatim (values are not
//     themselves expanded); a name declared with valueFrom expands to "";
//     when a name is declared twice, the last declaration wins;
//   - a reference to a name that is not declared stays literal ("$(B)");
//   - "$$" is an escaped "$" and becomes "$" (so "$$(A)" yields "$(A)");
//   - "$" followed by any other character, an unterminated "$(", and a
//     trailing "$" are kept as they are.
//
// No image env, downward API values or shell is involved. The result is a
// new slice; cmd is not modified. ExpandCommand never fails.
func ExpandCommand(cmd []string, env []v1.EnvVar) []string {
	if cmd == nil {
		return nil
	}
	needs := false
	for _, arg := range cmd {
		needs = needs || strings.IndexByte(arg, '$') >= 0
	}
	if !needs {
		// Nothing to expand: share the spec's slice (it is never written;
		// a worker's spec is an immutable snapshot).
		return cmd
	}
	vars := make(map[string]string, len(env))
	for i := range env {
		// A valueFrom variable has an empty Value: it expands to "".
		vars[env[i].Name] = env[i].Value
	}
	out := make([]string, len(cmd))
	for i, arg := range cmd {
		out[i] = expand(arg, vars)
	}
	return out
}

// expand applies the E1 rules to one string.
func expand(s string, vars map[string]string) string {
	if strings.IndexByte(s, '$') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i += 2
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unterminated reference: keep "$(" and scan on after it.
				b.WriteString("$(")
				i += 2
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 3 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i += 2
		}
	}
	return b.String()
}
