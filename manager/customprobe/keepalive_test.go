package customprobe

import (
	"testing"

	"k8s.io/utils/ptr"
)

// httpGet.keepAlive decodes beside the v1 handler (never into
// it), true or false; not set, the node's default applies (nil); anything
// else, and keepAlive on another handler, is refused naming the field.
func TestParseKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		element string
		want    *bool
	}{
		{`"httpGet":{"port":8080,"keepAlive":true}`, ptr.To(true)},
		{`"httpGet":{"port":8080,"keepAlive":false,"expect":{"status":[200]}}`, ptr.To(false)},
		{`"httpGet":{"port":8080}`, nil},
	} {
		got, errs := parseOne(t, `"type":"readiness",`+tc.element, Options{})
		if len(errs) != 0 || len(got) != 1 {
			t.Fatalf("%s: probes %+v, errors %v", tc.element, got, errs)
		}
		ka := got[0].Extension().KeepAlive
		if (ka == nil) != (tc.want == nil) || (ka != nil && *ka != *tc.want) {
			t.Fatalf("%s: keepAlive %v, want %v", tc.element, ka, tc.want)
		}
		if got[0].Probe.HTTPGet == nil || got[0].Probe.HTTPGet.Port.IntValue() != 8080 {
			t.Fatalf("%s: the v1 handler did not decode: %+v", tc.element, got[0].Probe.HTTPGet)
		}
	}
	const path = "metadata.annotations[probed.io/probes][0]."
	for _, tc := range []struct{ element, want string }{
		{`"httpGet":{"port":8080,"keepAlive":"yes"}`, path + `httpGet.keepAlive: Invalid value: "\"yes\"": must be true or false`},
		{`"httpGet":{"port":8080,"keepAlive":null}`, path + `httpGet.keepAlive: Invalid value: "null": must be true or false`},
		{`"tcpSocket":{"port":8080,"keepAlive":true}`, path + `tcpSocket: Invalid value:`},
	} {
		got, errs := parseOne(t, `"type":"readiness",`+tc.element, Options{})
		if len(got) != 0 {
			t.Fatalf("%s: an invalid element was kept", tc.element)
		}
		wantErrors(t, errs, []string{tc.want})
	}
}
