package pluginproto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/probed/probed/runtime/pluginproto/probeplugin/v1"

	"github.com/probed/probed/runtime"
)

func TestEnums(t *testing.T) {
	for _, r := range []runtime.Result{runtime.Success, runtime.Warning, runtime.Failure, runtime.Unknown} {
		got, err := ResultFromProto(ResultToProto(r))
		if err != nil || got != r {
			t.Errorf("%v: %v, %v", r, got, err)
		}
	}
	if _, err := ResultFromProto(pb.Result_RESULT_UNSPECIFIED); err == nil {
		t.Error("RESULT_UNSPECIFIED accepted")
	}
	if _, err := ResultFromProto(pb.Result(42)); err == nil {
		t.Error("out-of-range result accepted")
	}
	for _, pt := range []runtime.ProbeType{runtime.Liveness, runtime.Readiness, runtime.Startup} {
		got, err := ProbeTypeFromProto(ProbeTypeToProto(pt))
		if err != nil || got != pt {
			t.Errorf("%v: %v, %v", pt, got, err)
		}
	}
	if _, err := ProbeTypeFromProto(pb.ProbeType_PROBE_TYPE_UNSPECIFIED); err == nil {
		t.Error("PROBE_TYPE_UNSPECIFIED accepted")
	}
}

func TestSpecRoundTrip(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	c := &v1.Container{Name: "app", Image: "dropped", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 80}}, Env: []v1.EnvVar{{Name: "A", Value: "b"}}}
	probe := &v1.Probe{TimeoutSeconds: 3, ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/x", Port: intstr.FromString("web")}}}
	spec := &runtime.Spec{Kind: runtime.KindHTTP, ProbeType: runtime.Startup, Pod: pod, Container: c, Probe: probe}
	raw, err := EncodeBuiltinSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.ProbeRequest{
		Kind: runtime.KindHTTP, ProbeType: ProbeTypeToProto(runtime.Startup), Params: map[string]string{SpecParam: raw},
		Target:  &pb.Target{PodUid: "u", PodNamespace: "ns", PodName: "p", ContainerName: "app", PodIp: "1.2.3.4", ContainerId: "c://x"},
		Attempt: 3,
	}
	got, err := SpecFromRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Plugin != nil || got.Kind != "http" || got.ProbeType != runtime.Startup || got.Pod.UID != "u" || got.Pod.Name != "p" ||
		got.Container.Image != "" || got.Container.Ports[0].ContainerPort != 80 || got.Container.Env[0].Value != "b" ||
		got.Probe.HTTPGet.Port.StrVal != "web" || got.Timeout() != 3*time.Second {
		t.Errorf("spec %+v", got)
	}
	if tg := TargetFromRequest(req); tg.PodIP != "1.2.3.4" || tg.ContainerID != "c://x" || tg.Attempt != 3 {
		t.Errorf("target %+v", tg)
	}
	if id := ProbeID(spec); id != "u/app/startup" {
		t.Errorf("ProbeID %q", id)
	}

	// A plugin kind.
	req = &pb.ProbeRequest{
		Kind: "redis", ProbeType: pb.ProbeType_PROBE_TYPE_LIVENESS, Timeout: durationpb.New(1500 * time.Millisecond),
		Params: map[string]string{"a": "b", "probed.io/other": "x"},
		Target: &pb.Target{Port: 6379, ContainerName: "app"},
	}
	got, err = SpecFromRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Plugin == nil || got.Plugin.Name != "redis" || got.Plugin.Port.IntValue() != 6379 || len(got.Plugin.Params) != 1 ||
		got.Plugin.Params["a"] != "b" || got.Probe.TimeoutSeconds != 1 || got.Container.Name != "app" {
		t.Errorf("plugin spec %+v %+v", got, got.Plugin)
	}
	req.Params[SpecParam] = `{"container":{"name":"x"}}`
	if _, err := SpecFromRequest(req); err == nil {
		t.Error("built-in spec without a probe accepted")
	}
}

// TestGeneratedCodeUpToDate regenerates the Go code of the proto (when
// protoc is installed) and compares it with the committed files.
func TestGeneratedCodeUpToDate(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not on PATH (apt-get install -y protobuf-compiler)")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "google.golang.org/protobuf/cmd/protoc-gen-go", "google.golang.org/grpc/cmd/protoc-gen-go-grpc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the protoc plugins: %v\n%s", err, out)
	}
	out := t.TempDir()
	gen := exec.Command(protoc,
		"--plugin=protoc-gen-go="+filepath.Join(bin, "protoc-gen-go"),
		"--plugin=protoc-gen-go-grpc="+filepath.Join(bin, "protoc-gen-go-grpc"),
		"-I", ".", "--go_out="+out, "--go_opt=paths=source_relative",
		"--go-grpc_out="+out, "--go-grpc_opt=paths=source_relative",
		"probeplugin/v1/probeplugin.proto")
	if o, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, o)
	}
	for _, f := range []string{"probeplugin.pb.go", "probeplugin_grpc.pb.go"} {
		want, _ := os.ReadFile(filepath.Join(out, "probeplugin/v1", f))
		have, _ := os.ReadFile(filepath.Join("probeplugin/v1", f))
		if !bytes.Equal(dropProtocVersion(want), dropProtocVersion(have)) {
			t.Errorf("probeplugin/v1/%s is stale: run make generate", f)
		}
	}
}

// dropProtocVersion removes the header line naming protoc's version, which
// differs between machines without changing the code.
func dropProtocVersion(b []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("// \tprotoc ")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// Sub-second timeouts reach the plugin to the millisecond: a
// plugin kind's timeout comes as a duration, a built-in spec carries its
// millisecond offsets.
func TestSpecFromRequestSubSecondTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, want time.Duration
	}{
		{300 * time.Millisecond, 300 * time.Millisecond},
		{1500 * time.Millisecond, 1500 * time.Millisecond},
		{2 * time.Second, 2 * time.Second},
		{0, time.Second},
	} {
		req := &pb.ProbeRequest{Kind: "redis", ProbeType: pb.ProbeType_PROBE_TYPE_LIVENESS, Timeout: durationpb.New(tc.timeout),
			Target: &pb.Target{ContainerName: "app"}}
		got, err := SpecFromRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		if got.Timeout() != tc.want {
			t.Errorf("timeout %v: spec.Timeout() = %v, want %v", tc.timeout, got.Timeout(), tc.want)
		}
	}
	spec := &runtime.Spec{Kind: runtime.KindTCP, ProbeType: runtime.Readiness, Pod: &v1.Pod{},
		Probe:        &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(80)}}},
		Milliseconds: &runtime.Milliseconds{Period: -900, Timeout: -700}}
	raw, err := EncodeBuiltinSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := SpecFromRequest(&pb.ProbeRequest{Kind: runtime.KindTCP, ProbeType: ProbeTypeToProto(runtime.Readiness),
		Params: map[string]string{SpecParam: raw}, Target: &pb.Target{ContainerName: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	if tm := got.Timing(); tm.Timeout != 300*time.Millisecond || tm.Period != 100*time.Millisecond {
		t.Errorf("built-in spec timing %+v, want timeout 300ms period 100ms", tm)
	}
}
