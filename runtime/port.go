package runtime

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ResolvePort resolves a probe port the way the kubelet does (spec 1.4,
// pkg/probe/util.go ResolveContainerPort as of v1.37.2):
//   - an int is taken as it is;
//   - a string is looked up by name among the container's ports and resolves
//     to that port's containerPort (never its hostPort, BR-20); a string that
//     looks like a number is still only a name, so "8080" is not found;
//   - the result must satisfy 0 < port < 65536.
//
// Errors: `port "NAME" not found`, `invalid port number: N`, or
// `intOrString had no kind` for a malformed value. The returned port is -1
// when nothing resolved, otherwise the resolved (maybe invalid) number.
func ResolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	port := -1
	switch p.Type {
	case intstr.Int:
		port = int(p.IntVal)
	case intstr.String:
		found := false
		if c != nil {
			for i := range c.Ports {
				if c.Ports[i].Name == p.StrVal {
					port = int(c.Ports[i].ContainerPort)
					found = true
					break
				}
			}
		}
		if !found {
			return -1, fmt.Errorf("port %q not found", p.StrVal)
		}
	default:
		return -1, fmt.Errorf("intOrString had no kind: %+v", p)
	}
	if port > 0 && port < 65536 {
		return port, nil
	}
	return port, fmt.Errorf("invalid port number: %d", port)
}
