package telemetry_test

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// receiver is an in-process OTLP/gRPC trace collector: the TraceService on
// a real grpc.Server listening on 127.0.0.1:0.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string
	srv  *grpc.Server

	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: ln.Addr().String(), srv: grpc.NewServer()}
	collectortrace.RegisterTraceServiceServer(r.srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		r.srv.Stop()
		<-done
	})
	return r
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, proto.Clone(req).(*collectortrace.ExportTraceServiceRequest))
	r.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// span is one received span with its resource.
type span struct {
	*tracepb.Span
	resource map[string]*commonpb.AnyValue
	attrs    map[string]*commonpb.AnyValue
}

func (s span) traceID() string  { return hex.EncodeToString(s.TraceId) }
func (s span) spanID() string   { return hex.EncodeToString(s.SpanId) }
func (s span) parentID() string { return hex.EncodeToString(s.ParentSpanId) }

func (s span) str(key string) string {
	v, ok := s.attrs[key]
	if !ok {
		return "<absent>"
	}
	return v.GetStringValue()
}

func (s span) int(key string) int64 {
	v, ok := s.attrs[key]
	if !ok {
		return -1
	}
	return v.GetIntValue()
}

func (s span) boolean(key string) (value, ok bool) {
	v, ok := s.attrs[key]
	return v.GetBoolValue(), ok
}

// spans returns every span received so far.
func (r *receiver) spans() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, req := range r.reqs {
		for _, rs := range req.ResourceSpans {
			res := attrMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, span{Span: s, resource: res, attrs: attrMap(s.Attributes)})
				}
			}
		}
	}
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}
