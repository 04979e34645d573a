//go:build linux

package runtime

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/internal/fdtest"
)

// dialProber dials addr once per attempt and reports the dial error as a
// Failure with the error as its Cause, as the built-in tcp handler does.
func dialProber(addr string) Prober {
	return ProberFunc(func(ctx context.Context, _ Target) (Outcome, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return Outcome{Result: Failure, Output: err.Error(), Cause: err}, nil
		}
		_ = c.Close()
		return Outcome{Result: Success}, nil
	})
}

func localResourceSpec(kind string) *Spec {
	return &Spec{
		Kind:      kind,
		ProbeType: Liveness,
		Pod:       &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}},
		Container: &v1.Container{Name: "c"},
		Probe:     &v1.Probe{TimeoutSeconds: 1},
	}
}

// TestLocalResourceErrorsUnderEMFILE (P5): in a process whose
// descriptor table is full, a real dial error (socket: too many open files)
// and a real exec start error are classified EMFILE; Run turns the dial's
// Failure into an errored run (3 attempts, P2) with the P5 event naming the
// cause, and the same probe succeeds once descriptors are free again.
func TestLocalResourceErrorsUnderEMFILE(t *testing.T) {
	if !fdtest.InChild() {
		fdtest.RunChild(t)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // also sets up the poller before the table is full
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	rt, err := New(Options{PoolSize: 1, ExecPoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if err := rt.Register("dial", HandlerFunc(func(*Spec) (Prober, error) { return dialProber(ln.Addr().String()), nil })); err != nil {
		t.Fatal(err)
	}
	p := rt.Prepare(localResourceSpec("dial"))

	release := fdtest.Exhaust(t)
	_, dialErr := net.Dial("tcp", ln.Addr().String())
	startErr := exec.Command("true").Start()
	rep := rt.Run(context.Background(), p, Target{PodIP: "127.0.0.1"})
	release()

	for what, err := range map[string]error{"dial": dialErr, "exec start": startErr} {
		if !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("%s under a full descriptor table: %v, want EMFILE", what, err)
		}
		lre, ok := LocalResource(err)
		if !ok || lre.Errno != syscall.EMFILE || lre.Reason != "EMFILE" || ErroredReason(err) != "EMFILE" {
			t.Errorf("LocalResource(%s error %q) = %+v, %v; want EMFILE", what, err, lre, ok)
		}
	}
	var lre *LocalResourceError
	if !errors.As(rep.Err, &lre) || rep.Outcome.Result != Unknown || rep.Attempts != MaxAttempts {
		t.Fatalf("Run under EMFILE = %+v, want errored (Unknown, a *LocalResourceError, %d attempts)", rep, MaxAttempts)
	}
	if !strings.Contains(rep.Err.Error(), "probe not attempted: probed is out of local resources (EMFILE): dial tcp") ||
		!strings.Contains(rep.Err.Error(), "too many open files") {
		t.Errorf("error text %q does not say why", rep.Err)
	}
	if rep := rt.Run(context.Background(), p, Target{PodIP: "127.0.0.1"}); rep.Err != nil || rep.Outcome.Result != Success {
		t.Errorf("Run with descriptors free = %+v, want Success", rep)
	}
}

// TestLocalResourceClassification: EADDRNOTAVAIL from a real bind(2) is a
// local-resource error; refused and timed-out connects, and Failures without
// a Cause, are verdicts about the target and stay Failures.
func TestLocalResourceClassification(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	// 192.0.2.1 (TEST-NET-1) is no address of this host: bind fails.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}}
	_, bindErr := d.Dial("tcp", closed)
	if !errors.Is(bindErr, syscall.EADDRNOTAVAIL) {
		t.Fatalf("dial from 192.0.2.1: %v, want EADDRNOTAVAIL", bindErr)
	}
	out, err := ClassifyAttempt(Outcome{Result: Failure, Output: bindErr.Error(), Cause: bindErr}, nil)
	var lre *LocalResourceError
	if !errors.As(err, &lre) || lre.Reason != "EADDRNOTAVAIL" || out.Result != Unknown || out.Output != "" {
		t.Errorf("ClassifyAttempt(EADDRNOTAVAIL Failure) = %+v, %v; want errored EADDRNOTAVAIL", out, err)
	}
	// Already classified: not wrapped twice.
	if _, again := ClassifyAttempt(Outcome{Result: Unknown}, err); again != err {
		t.Errorf("ClassifyAttempt wrapped a LocalResourceError again: %v", again)
	}

	_, refused := net.Dial("tcp", closed)
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Fatalf("dial of a closed port: %v", refused)
	}
	for name, o := range map[string]Outcome{
		"refused":   {Result: Failure, Output: refused.Error(), Cause: refused},
		"deadline":  {Result: Failure, Output: "timeout", Cause: context.DeadlineExceeded},
		"no cause":  {Result: Failure, Output: "HTTP probe failed with statuscode: 500"},
		"success":   {Result: Success, Cause: syscall.EMFILE}, // Cause only matters for a Failure
		"exit code": {Result: Failure, Output: "exit 1", ExitCode: 1},
	} {
		got, err := ClassifyAttempt(o, nil)
		if err != nil || got.Result != o.Result || got.Output != o.Output {
			t.Errorf("%s: ClassifyAttempt = %+v, %v; want the outcome unchanged", name, got, err)
		}
	}
	if r := ErroredReason(refused); r != ReasonHandlerError {
		t.Errorf("ErroredReason(refused) = %q, want %q", r, ReasonHandlerError)
	}
	if r := ErroredReason(nil); r != "" {
		t.Errorf("ErroredReason(nil) = %q", r)
	}
}
