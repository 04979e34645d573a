package handlers

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/probed/probed/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// P4: every built-in kind of runtime.BuiltinKinds has a constructor here,
// and Register puts exactly those kinds on a runtime.
func TestP4_EveryBuiltinKindIsConstructedAndRegistered(t *testing.T) {
	for _, kind := range runtime.BuiltinKinds() {
		if h, err := New(kind, nil); err != nil || h == nil {
			t.Fatalf("New(%q) = %v, %v", kind, h, err)
		}
	}
	if _, err := New("redis", nil); err == nil || !strings.Contains(err.Error(), "exec, http, tcp, grpc") {
		t.Fatalf("New(redis) error %v, want one naming the built-in kinds", err)
	}
	rt, err := runtime.New(runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	if err := Register(rt, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rt.Kinds(), ","), "exec,grpc,http,tcp"; got != want {
		t.Fatalf("registered kinds %s, want %s", got, want)
	}
	if err := Register(rt, nil); err == nil {
		t.Fatal("registering the built-ins twice succeeded")
	}
	for _, kind := range runtime.BuiltinKinds() {
		if !runtime.IsBuiltinKind(kind) {
			t.Fatalf("IsBuiltinKind(%q) = false", kind)
		}
	}
	if runtime.IsBuiltinKind("redis") {
		t.Fatal("IsBuiltinKind(redis) = true")
	}
}
