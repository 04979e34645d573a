//go:build linux

package tcp

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/runtime"
)

// unansweredPort returns a loopback port whose handshake never completes:
// a listener with a backlog of one that never accepts, its accept queue
// filled, so the kernel drops further SYNs.
func unansweredPort(t *testing.T) int {
	port, _ := unansweredListener(t)
	return port
}

// unansweredListener is unansweredPort and the listener's socket, whose
// accept queue the test may drain to let the handshake complete.
func unansweredListener(t *testing.T) (port, fd int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port = sa.(*unix.SockaddrInet4).Port
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; i < 64; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && i > 0 {
				return port, fd
			}
			t.Fatalf("filling the accept queue: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the accept queue did not fill up")
	return 0, 0
}

// T1 on a fake clock: a connect that has not completed when the fake clock
// passes timeoutSeconds (30 s, so a real-time bound would not end it within
// the wait) fails with the kubelet's dial timeout, the output the same
// probe gives on the real clock.
func TestT1_TimeoutOnFakeClock(t *testing.T) {
	port := unansweredPort(t)
	spec := tcpSpec(portAction(port))
	spec.Probe.TimeoutSeconds = 30
	p, err := New().Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	realCtx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	real, _ := p.Probe(realCtx, runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
	cancel()
	if real.Result != runtime.Failure {
		t.Fatalf("real clock: %v %q, want a dial timeout Failure", real.Result, real.Output)
	}

	fc := testingclock.NewFakeClock(time.Now())
	ctx, cancel := runtime.WithTimeout(context.Background(), fc, spec.Timeout())
	defer cancel()
	type result struct {
		out runtime.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := p.Probe(ctx, runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
		done <- result{out, err}
	}()
	fc.Step(spec.Timeout())
	select {
	case r := <-done:
		if r.err != nil || r.out.Result != runtime.Failure || r.out.Output != real.Output {
			t.Fatalf("fake clock: (%v, %q, %v), want Failure %q", r.out.Result, r.out.Output, r.err, real.Output)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connect was not cut when the fake clock passed the timeout")
	}
}

// T1 on a fake clock: a connect that completes after more real time than
// timeoutSeconds (the accept queue is drained after 1.2 s; the kernel's
// SYN retransmission then completes the handshake), while the fake clock
// stays before the deadline, is not cut off: Success.
func TestT1_NotCutOnRealTimeOnFakeClock(t *testing.T) {
	port, fd := unansweredListener(t)
	p, err := New().Prepare(tcpSpec(portAction(port)))
	if err != nil {
		t.Fatal(err)
	}
	fc := testingclock.NewFakeClock(time.Now())
	ctx, cancel := runtime.WithTimeout(context.Background(), fc, time.Second)
	defer cancel()
	drained := time.AfterFunc(1200*time.Millisecond, func() {
		_ = unix.SetNonblock(fd, true)
		for i := 0; i < 4; i++ {
			if nfd, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC); err == nil {
				unix.Close(nfd)
			}
		}
	})
	defer drained.Stop()
	out, err := p.Probe(ctx, runtime.Target{PodIP: "127.0.0.1", Attempt: 1})
	if err != nil || out.Result != runtime.Success {
		t.Fatalf("(%v, %q, %v), want Success", out.Result, out.Output, err)
	}
}
