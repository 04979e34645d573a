package http

import (
	"context"
	"io"
	nethttp "net/http"
	"testing"

	"github.com/probed/probed/runtime"
)

// BenchmarkHTTPProbe measures one attempt against a loopback server,
// connection set-up included (keep-alives are off, H3).
func BenchmarkHTTPProbe(b *testing.B) {
	s := serve(b, func(w nethttp.ResponseWriter, r *nethttp.Request) { io.WriteString(w, "ok") })
	p := prepare(b, New(), httpSpec(get(portOf(b, s), "/healthz")))
	ctx := context.Background()
	target := runtime.Target{PodIP: podIP, Attempt: 1}
	b.ReportAllocs()
	for b.Loop() {
		got, err := p.Probe(ctx, target)
		if err != nil || got.Result != runtime.Success {
			b.Fatalf("outcome (%v, %q, %v)", got.Result, got.Output, err)
		}
	}
}
