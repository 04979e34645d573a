package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/examples/plugins/internal/redistest"
	"github.com/probed/probed/runtime"
)

func spec(port int, params map[string]string) *runtime.Spec {
	return &runtime.Spec{
		Kind:      Kind,
		Container: &v1.Container{Name: "redis"},
		Probe:     &v1.Probe{TimeoutSeconds: 1},
		Plugin:    &runtime.PluginAction{Name: Kind, Port: intstr.FromInt32(int32(port)), Params: params},
	}
}

func probe(t *testing.T, port int, params map[string]string) runtime.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return probeIn(t, ctx, port, params)
}

// probeIn prepares and runs one probe of 127.0.0.1:port with ctx.
func probeIn(t *testing.T, ctx context.Context, port int, params map[string]string) runtime.Outcome {
	t.Helper()
	pr, err := Handler{}.Prepare(spec(port, params))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pr.Probe(ctx, runtime.Target{PodIP: "127.0.0.1"})
	if err != nil {
		t.Fatalf("Probe returned an error: %v", err)
	}
	return out
}

func TestPing(t *testing.T) {
	t.Parallel()
	plain := redistest.Start(t, redistest.Options{})
	auth := redistest.Start(t, redistest.Options{Password: "s3cret-pw"})
	tlsSrv := redistest.Start(t, redistest.Options{TLS: true})
	cases := []struct {
		name   string
		port   int
		params map[string]string
		result runtime.Result
		output string // substring
	}{
		{"plain", plain.Port, nil, runtime.Success, "PONG"},
		{"password", auth.Port, map[string]string{"password": "s3cret-pw"}, runtime.Success, "PONG"},
		{"default user and password", auth.Port, map[string]string{"username": "default", "password": "s3cret-pw"}, runtime.Success, "PONG"},
		{"wrong password", auth.Port, map[string]string{"password": "nope"}, runtime.Failure, "WRONGPASS"},
		{"no password", auth.Port, nil, runtime.Failure, "NOAUTH"},
		{"tls", tlsSrv.Port, map[string]string{"tls": "true"}, runtime.Success, "PONG"},
		{"plaintext to a tls port", tlsSrv.Port, map[string]string{"tls": "false"}, runtime.Failure, "redis PING"},
		{"tls to a plaintext port", plain.Port, map[string]string{"tls": "true"}, runtime.Failure, "redis PING"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := probe(t, c.port, c.params)
			if out.Result != c.result || !strings.Contains(out.Output, c.output) {
				t.Errorf("got %v %q, want %v containing %q", out.Result, out.Output, c.result, c.output)
			}
			if strings.Contains(out.Output, "s3cret") || strings.Contains(out.Output, "nope") {
				t.Errorf("output leaks the password: %q", out.Output)
			}
		})
	}
	// A server that goes away fails the probe.
	plain.Stop()
	if out := probe(t, plain.Port, nil); out.Result != runtime.Failure || !strings.Contains(out.Output, "connection refused") {
		t.Errorf("stopped server: %+v", out)
	}
}

// TestNotPong: an answer other than PONG fails.
func TestNotPong(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 512)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					reply := "-ERR unknown command\r\n"
					if strings.Contains(strings.ToUpper(string(buf[:n])), "PING") {
						reply = "+HELLO\r\n"
					}
					if _, err := c.Write([]byte(reply)); err != nil {
						return
					}
				}
			}()
		}
	}()
	out := probe(t, l.Addr().(*net.TCPAddr).Port, nil)
	if out.Result != runtime.Failure || out.Output != `redis PING answered "HELLO", want PONG` {
		t.Errorf("got %+v", out)
	}
}

// TestHungServer: a server that accepts but never answers fails within
// the timeout.
func TestHungServer(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	start := time.Now()
	out := probe(t, l.Addr().(*net.TCPAddr).Port, nil)
	if out.Result != runtime.Failure {
		t.Errorf("got %+v", out)
	}
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Errorf("took %s", d)
	}
}

func TestPrepare(t *testing.T) {
	t.Parallel()
	if _, err := (Handler{}).Prepare(spec(6379, map[string]string{"tls": "maybe"})); err == nil || !strings.Contains(err.Error(), "want true or false") {
		t.Errorf("tls=maybe: %v", err)
	}
	if _, err := (Handler{}).Prepare(spec(6379, map[string]string{"username": "u"})); err == nil || !strings.Contains(err.Error(), "needs a password") {
		t.Errorf("username without password: %v", err)
	}
	pr, err := Handler{}.Prepare(spec(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	if p := pr.(*prober); p.port != "6379" {
		t.Errorf("default port %s", p.port)
	}
}
