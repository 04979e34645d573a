package http

import (
	"context"
	"io"
	nethttp "net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/probed/probed/plugins/internal/dialer"
	"github.com/probed/probed/runtime"
)

// okServer is a loopback server answering "ok" to every request.
func okServer(t testing.TB) int {
	return portOf(t, serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { io.WriteString(w, "ok") }))
}

// bareGET returns the floor of one HTTP probe attempt against port: the
// GET the prober sends (H1–H3: a new connection, "Connection: close",
// User-Agent and Accept, no compression, no proxy, the handlers' dialer),
// the body read into a buffer of runtime.MaxOutputBytes, on a client whose
// timeout is the probe's (1 s), with none of the prober's work around it.
// The benchmark harness's getloop (bench/cmd/probebench/floor.go) is the
// same GET.
func bareGET(t testing.TB, port int) func(ctx context.Context) error {
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port), Path: "/healthz"}
	header := nethttp.Header{"User-Agent": {runtime.KubeProbeUserAgent}, "Accept": {"*/*"}}
	tr := &nethttp.Transport{
		DialContext:            dialer.New(time.Second).DialContext,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: runtime.MaxResponseHeaderBytes,
	}
	t.Cleanup(tr.CloseIdleConnections)
	client := &nethttp.Client{Transport: tr, Timeout: time.Second}
	buf := make([]byte, runtime.MaxOutputBytes)
	return func(ctx context.Context) error {
		resp, err := client.Do((&nethttp.Request{Method: nethttp.MethodGet, URL: u, Header: header}).WithContext(ctx))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.ReadFull(resp.Body, buf); err != io.ErrUnexpectedEOF && err != nil {
			return err
		}
		return nil
	}
}

// BenchmarkHTTPProbe measures one attempt against a loopback server,
// connection set-up included (keep-alives are off, H3): "deadline" with
// the runtime's attempt deadline (context.WithTimeout of the probe
// timeout, P3, included in the figures), "no-deadline" without one.
// BenchmarkHTTPBareGET is its floor: the difference in allocs/op and B/op
// is what the handler adds to the GET.
func BenchmarkHTTPProbe(b *testing.B) {
	p := prepare(b, New(), httpSpec(get(okServer(b), "/healthz")))
	target := runtime.Target{PodIP: podIP, Attempt: 1}
	probe := func(b *testing.B, ctx context.Context) {
		got, err := p.Probe(ctx, target)
		if err != nil || got.Result != runtime.Success {
			b.Fatalf("outcome (%v, %q, %v)", got.Result, got.Output, err)
		}
	}
	b.Run("deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			probe(b, ctx)
			cancel()
		}
	})
	b.Run("no-deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			probe(b, context.Background())
		}
	})
}

// BenchmarkHTTPBareGET is the floor of BenchmarkHTTPProbe (bareGET), with
// the same two contexts.
func BenchmarkHTTPBareGET(b *testing.B) {
	get := bareGET(b, okServer(b))
	b.Run("deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := get(ctx); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
	b.Run("no-deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := get(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHTTPPrepare measures Prepare of an httpGet probe without
// httpHeaders, the common case: B/op is what a registered HTTP probe holds
// of its handler's making (the prober, its URL template, its header set).
func BenchmarkHTTPPrepare(b *testing.B) {
	h := New()
	spec := httpSpec(get(8080, "/healthz"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Prepare(spec); err != nil {
			b.Fatal(err)
		}
	}
}
