package http

import (
	"context"
	"errors"
	nethttp "net/http"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/probed/probed/runtime"
)

// attempt is one Probe call in flight under a fake clock.
type attempt struct {
	out  runtime.Outcome
	err  error
	done chan struct{}
}

// probeOnFakeClock starts one attempt whose deadline (1 s, the spec's
// timeoutSeconds) runs on fc, as runtime.Run makes it.
func probeOnFakeClock(t *testing.T, p runtime.Prober, fc *testingclock.FakeClock) *attempt {
	t.Helper()
	a := &attempt{done: make(chan struct{})}
	ctx, cancel := runtime.WithTimeout(context.Background(), fc, time.Second)
	go func() {
		defer close(a.done)
		defer cancel()
		a.out, a.err = p.Probe(ctx, runtime.Target{PodIP: podIP, Attempt: 1})
	}()
	return a
}

// wait returns once the attempt has ended; 10 s of real time is only the
// bound that keeps a broken build from hanging.
func (a *attempt) wait(t *testing.T) {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt did not end")
	}
}

// hungServer answers nothing until the test ends; arrived receives one
// value per request that reached it. With headers, it sends the status
// line and headers first and then holds the body.
func hungServer(t *testing.T, headers bool) (port int, arrived chan struct{}) {
	arrived = make(chan struct{}, 4)
	stop := make(chan struct{})
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if headers {
			w.WriteHeader(200)
			_, _ = w.Write([]byte("partial"))
			w.(nethttp.Flusher).Flush()
		}
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	})
	t.Cleanup(func() { close(stop) })
	return portOf(t, s), arrived
}

func awaitRequest(t *testing.T, arrived chan struct{}) {
	t.Helper()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the server")
	}
}

// H4, H6 on a fake clock: a target that has not answered its headers when
// the fake clock passes timeoutSeconds fails with exactly the kubelet's
// output at its timeout, the client-timeout text the same handler gives on
// the real clock, however little real time has passed.
func TestH4_TimeoutOnFakeClock(t *testing.T) {
	port, arrived := hungServer(t, false)
	p := prepare(t, New(), httpSpec(get(port, "/")))

	real, err := probeWithin(p, podIP, 300*time.Millisecond)
	if err != nil || real.Result != runtime.Failure {
		t.Fatalf("real clock: (%v, %q, %v), want Failure", real.Result, real.Output, err)
	}
	awaitRequest(t, arrived)

	fc := testingclock.NewFakeClock(time.Now())
	a := probeOnFakeClock(t, p, fc)
	awaitRequest(t, arrived)
	fc.Step(time.Second)
	a.wait(t)
	if a.err != nil || a.out.Result != runtime.Failure || a.out.Output != real.Output {
		t.Fatalf("fake clock: (%v, %q, %v), want Failure with the real clock's output %q", a.out.Result, a.out.Output, a.err, real.Output)
	}
	var ne interface{ Timeout() bool }
	if !errors.As(a.out.Cause, &ne) || !ne.Timeout() || !errors.Is(a.out.Cause, context.DeadlineExceeded) {
		t.Fatalf("cause %v is not a timeout", a.out.Cause)
	}
}

// H4, H6 on a fake clock: a body still arriving when the fake clock passes
// timeoutSeconds ends the attempt with the error the client timeout gives
// on the real clock (errored, BR-08 c).
func TestH4_BodyTimeoutOnFakeClock(t *testing.T) {
	port, arrived := hungServer(t, true)
	p := prepare(t, New(), httpSpec(get(port, "/")))

	_, realErr := probeWithin(p, podIP, 300*time.Millisecond)
	if realErr == nil {
		t.Fatal("real clock: no error for a body cut by the timeout")
	}
	awaitRequest(t, arrived)

	// The server has flushed the headers when it signals, but the client
	// may not have read them yet when the clock is stepped: such a try
	// cuts the attempt while it awaits the headers (no status code), and
	// is made again.
	var a *attempt
	for try := 1; ; try++ {
		fc := testingclock.NewFakeClock(time.Now())
		a = probeOnFakeClock(t, p, fc)
		awaitRequest(t, arrived)
		time.Sleep(20 * time.Millisecond) // room for the client to read the headers
		fc.Step(time.Second)
		a.wait(t)
		if a.out.StatusCode != 0 || try == 5 {
			break
		}
		t.Logf("try %d: cut before the client read the headers (%q); again", try, a.out.Output)
	}
	if a.err == nil || a.err.Error() != realErr.Error() || a.out.Result != runtime.Failure || a.out.StatusCode != 200 {
		t.Fatalf("fake clock: (%v, %d, %v), want Failure with the real clock's error %q", a.out.Result, a.out.StatusCode, a.err, realErr)
	}
}

// H4 on a fake clock: a target that answers after more real time than
// timeoutSeconds, while the fake clock stays before the deadline, is not
// cut off: no real-time timer bounds the attempt.
func TestH4_NotCutOnRealTimeOnFakeClock(t *testing.T) {
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		time.Sleep(1300 * time.Millisecond)
		_, _ = w.Write([]byte("late but in time"))
	})
	p := prepare(t, New(), httpSpec(get(portOf(t, s), "/")))
	fc := testingclock.NewFakeClock(time.Now())
	a := probeOnFakeClock(t, p, fc)
	a.wait(t)
	if a.err != nil || a.out.Result != runtime.Success || a.out.Output != "late but in time" {
		t.Fatalf("(%v, %q, %v), want Success", a.out.Result, a.out.Output, a.err)
	}
}
