package runtime

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// UT1 (TestFindPortByName / TestResolveContainerPort, spec 1.4 and 8.5):
// named lookup, unknown names, range checks and a malformed IntOrString.
func TestUT1_ResolvePort(t *testing.T) {
	container := &v1.Container{Ports: []v1.ContainerPort{
		{Name: "foo", ContainerPort: 8080},
		{Name: "bar", ContainerPort: 9000},
		// BR-20: the name resolves to containerPort, never hostPort.
		{Name: "http-alt", ContainerPort: 8081, HostPort: 18080},
		{Name: "out-of-range", ContainerPort: 70000},
	}}
	cases := []struct {
		name    string
		port    intstr.IntOrString
		c       *v1.Container
		want    int
		wantErr string
	}{
		{"int 443", intstr.FromInt32(443), container, 443, ""},
		{"int without container", intstr.FromInt32(80), nil, 80, ""},
		{"name foo", intstr.FromString("foo"), container, 8080, ""},
		{"name bar", intstr.FromString("bar"), container, 9000, ""},
		{"name resolves to containerPort, not hostPort", intstr.FromString("http-alt"), container, 8081, ""},
		{"unknown name", intstr.FromString("metrcis"), container, -1, `port "metrcis" not found`},
		{"name without container", intstr.FromString("foo"), nil, -1, `port "foo" not found`},
		{"numeric string is only a name", intstr.FromString("8080"), container, -1, `port "8080" not found`},
		{"66666 out of range, value returned", intstr.FromInt32(66666), container, 66666, "invalid port number: 66666"},
		{"65535 upper bound", intstr.FromInt32(65535), container, 65535, ""},
		{"65536 out of range", intstr.FromInt32(65536), container, 65536, "invalid port number: 65536"},
		{"1 lower bound", intstr.FromInt32(1), container, 1, ""},
		{"0 invalid", intstr.FromInt32(0), container, 0, "invalid port number: 0"},
		{"-1 invalid", intstr.FromInt32(-1), container, -1, "invalid port number: -1"},
		{"named port out of range", intstr.FromString("out-of-range"), container, 70000, "invalid port number: 70000"},
		{"bad IntOrString type", intstr.IntOrString{Type: 7, IntVal: 80}, container, -1, "intOrString had no kind"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ResolvePort(c.port, c.c)
			if got != c.want {
				t.Errorf("port = %d, want %d", got, c.want)
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("error = %v, want nil", err)
			case c.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantErr)):
				t.Errorf("error = %v, want %q", err, c.wantErr)
			}
		})
	}
}
