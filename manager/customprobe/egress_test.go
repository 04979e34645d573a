package customprobe

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// TestParseHostUnderTheEgressRule: in cluster mode (Options.Egress) a probe
// connects only to its pod's IP: httpGet.host and
// tcpSocket.host are Forbidden, naming the field, the reason and the flag;
// with allowed ranges an IP literal outside them is refused and a name is
// accepted (checked at dial time). Without the rule (manifest mode) any
// host is the API's.
func TestParseHostUnderTheEgressRule(t *testing.T) {
	const annotation = `[
	 {"container":"app","type":"readiness","periodSeconds":2,"httpGet":{"host":"127.0.0.2","port":18500,"path":"/computeMetadata/v1/","httpHeaders":[{"name":"Metadata-Flavor","value":"Google"}]}},
	 {"container":"app","type":"liveness","tcpSocket":{"host":"169.254.169.254","port":80}},
	 {"container":"app","type":"startup","tcpSocket":{"host":"db.internal","port":5432}},
	 {"container":"proxy","type":"readiness","httpGet":{"path":"/ready","port":8080}}]`
	pod := testPod(annotation)

	got, errs := ParseWith(pod, Options{Egress: egress.NewRule(nil)})
	want := []string{
		`metadata.annotations[probed.io/probes][0].httpGet.host: Forbidden: probes may connect only to their pod's IP: leave host empty (the operator can allow more with --allow-probe-host)`,
		`metadata.annotations[probed.io/probes][1].tcpSocket.host: Forbidden: probes may connect only to their pod's IP: leave host empty (the operator can allow more with --allow-probe-host)`,
		`metadata.annotations[probed.io/probes][2].tcpSocket.host: Forbidden: probes may connect only to their pod's IP: leave host empty (the operator can allow more with --allow-probe-host)`,
	}
	if s := errStrings(errs); !reflect.DeepEqual(s, want) {
		t.Errorf("no ranges allowed:\n got %q\nwant %q", s, want)
	}
	if len(got) != 1 || got[0].Container != "proxy" {
		t.Errorf("only the probe without host may run: %+v", got)
	}

	got, errs = ParseWith(pod, Options{Egress: egress.NewRule([]netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")})})
	want = []string{
		`metadata.annotations[probed.io/probes][1].tcpSocket.host: Forbidden: 169.254.169.254 is outside the ranges the operator allows (--allow-probe-host 127.0.0.2/32); probes may connect only to their pod's IP and those ranges`,
	}
	if s := errStrings(errs); !reflect.DeepEqual(s, want) {
		t.Errorf("127.0.0.2/32 allowed:\n got %q\nwant %q", s, want)
	}
	if len(got) != 3 || got[0].Type != runtime.Readiness || got[1].Type != runtime.Startup {
		t.Errorf("the allowed IP and the name must be kept: %+v", got)
	}

	if got, errs := ParseWith(pod, Options{}); len(errs) != 0 || len(got) != 4 {
		t.Errorf("manifest mode: %d probes, errors %q", len(got), errStrings(errs))
	}
}
