//go:build linux

package faults

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probed/probed/runtime"
)

// TestTCPFaults runs tcpSocket probes (timeoutSeconds 1) through the
// runtime's network lane against ports that never complete a handshake for
// the prober, and one that does without the application's help (BR-18):
//
//   - a listener whose application never accepts, with room in its
//     backlog: the kernel completes the handshake, Success at once (a);
//   - a listener whose accept queue is full: the kernel drops the SYN, the
//     dial times out, Failure at the 1 s timeout, not retried;
//   - a port that drops SYNs (a packet filter inside a network namespace
//     of the test's own): Failure at the timeout (d). Skipped where the
//     test may not create namespaces or the kernel lacks the filter.
//
// Every attempt holds one slot and leaves no socket of the prober's side.
func TestTCPFaults(t *testing.T) {
	noLeaks(t)
	r := newRig(t)

	t.Run("never-accepts-with-room", func(t *testing.T) {
		withTries(t, func(t *testing.T) []*miss {
			fd, port := rawListener(t, 16)
			defer unix.Close(fd)
			o := r.run(t, tcpProbe(port), nil)
			t.Logf("%v", o)
			expectVerdict(t, o, runtime.Success, false)
			expectOneSlot(t, o)
			_, late := expectNoProberSockets(t, port, nil)
			return []*miss{fastProblem(o, 500*time.Millisecond), late}
		})
	})

	t.Run("backlog-full", func(t *testing.T) {
		withTries(t, func(t *testing.T) []*miss {
			fd, port := rawListener(t, 1)
			defer unix.Close(fd)
			fillers := fillBacklog(t, port)
			defer func() {
				for _, c := range fillers {
					c.Close()
				}
			}()
			exclude := map[int]bool{}
			for _, c := range fillers {
				exclude[c.LocalAddr().(*net.TCPAddr).Port] = true
			}
			o := r.run(t, tcpProbe(port), nil)
			t.Logf("%v (%d connections fill the accept queue)", o, len(fillers))
			expectVerdict(t, o, runtime.Failure, false)
			expectOneSlot(t, o)
			if !strings.Contains(o.rep.Outcome.Output, "i/o timeout") {
				t.Errorf("output %q, want a dial timeout", o.rep.Outcome.Output)
			}
			_, late := expectNoProberSockets(t, port, exclude)
			return []*miss{timedOutProblem(o), late}
		})
	})

	t.Run("drops-SYN", func(t *testing.T) {
		ns := newNetns(t)
		var (
			ln  net.Listener
			err error
		)
		ns.do(t, func() { ln, err = net.Listen("tcp", "127.0.0.1:0") })
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port

		// Before the filter, the port answers (the listener's backlog
		// completes the handshake).
		o := r.run(t, tcpProbe(port), func(f func()) { ns.do(t, f) })
		if o.rep.Outcome.Result != runtime.Success {
			t.Fatalf("before the filter: %v, want Success", o)
		}
		ns.dropSYNs(t, port)

		withTries(t, func(t *testing.T) []*miss {
			o := r.run(t, tcpProbe(port), func(f func()) { ns.do(t, f) })
			t.Logf("%v", o)
			expectVerdict(t, o, runtime.Failure, false)
			expectOneSlot(t, o)
			if !strings.Contains(o.rep.Outcome.Output, "i/o timeout") {
				t.Errorf("output %q, want a dial timeout", o.rep.Outcome.Output)
			}
			var late *miss
			ns.do(t, func() { _, late = expectNoProberSockets(t, port, nil) })
			return []*miss{timedOutProblem(o), late}
		})
		if dropped := ns.dropped(t); dropped == 0 {
			t.Errorf("the filter dropped no packet")
		} else {
			t.Logf("the filter dropped %d packets", dropped)
		}
	})
}

// rawListener listens on 127.0.0.1 with the given backlog and never
// accepts.
func rawListener(t *testing.T, backlog int) (fd, port int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return fd, sa.(*unix.SockaddrInet4).Port
}

// fillBacklog connects to port until a connect times out: the listener's
// accept queue is full and the kernel drops further SYNs.
func fillBacklog(t *testing.T, port int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; i < 64; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && len(conns) > 0 {
				return conns
			}
			t.Fatalf("filling the accept queue: %v after %d connections", err, len(conns))
		}
		conns = append(conns, c)
	}
	t.Fatalf("the accept queue took %d connections without filling up", len(conns))
	return nil
}

// ---------------------------------------------------------------------------
// A network namespace of the test's own.

// netns is a named network namespace (ip netns add) with only a loopback
// interface; a packet filter applied inside it touches nothing else.
type netns struct {
	name, path string
}

// newNetns creates the namespace, or skips the test with the reason when
// it cannot. Cleanup deletes it.
func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a port that drops SYNs needs a network namespace: run as root to cover it")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("a port that drops SYNs needs %q (iproute2) on PATH: %v", tool, err)
		}
	}
	ns := &netns{name: fmt.Sprintf("probed-faults-%d", os.Getpid())}
	if out, err := exec.Command("ip", "netns", "add", ns.name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (ip netns add): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.name, err, out)
		}
	})
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		if p := filepath.Join(dir, ns.name); fileExists(p) {
			ns.path = p
			break
		}
	}
	if ns.path == "" {
		t.Fatalf("ip netns add %s left no /run/netns/%s", ns.name, ns.name)
	}
	ns.ip(t, "link", "set", "lo", "up")
	return ns
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ip runs `ip -n NAME args...`.
func (ns *netns) ip(t *testing.T, args ...string) {
	t.Helper()
	args = append([]string{"-n", ns.name}, args...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// tc runs tc inside the namespace; it reports failure instead of failing.
func (ns *netns) tc(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns.name, "tc"}, args...)...).CombinedOutput()
	return string(out), err
}

// dropSYNs makes the namespace's loopback drop every TCP packet to port,
// SYNs included: an HTB root qdisc whose filter sends them to a class whose
// FIFO holds nothing. (nftables or iptables would do the same; they need
// their user-space tools, iproute2's tc does not.) Skips the test when the
// kernel lacks the pieces.
func (ns *netns) dropSYNs(t *testing.T, port int) {
	t.Helper()
	steps := [][]string{
		{"qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10"},
		{"class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"},
		{"class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", "10gbit"},
		{"qdisc", "add", "dev", "lo", "parent", "1:20", "handle", "20:", "pfifo", "limit", "0"},
		{"filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
			"match", "ip", "protocol", "6", "0xff", "match", "ip", "dport", strconv.Itoa(port), "0xffff", "flowid", "1:20"},
	}
	for _, s := range steps {
		if out, err := ns.tc(s...); err != nil {
			t.Skipf("the kernel cannot drop packets in the namespace (tc %s): %v: %s", strings.Join(s, " "), err, out)
		}
	}
}

// dropped returns the packets the drop queue discarded.
func (ns *netns) dropped(t *testing.T) int {
	t.Helper()
	out, err := ns.tc("-s", "qdisc", "show", "dev", "lo", "parent", "1:20")
	if err != nil {
		t.Errorf("tc -s qdisc show: %v: %s", err, out)
		return 0
	}
	i := strings.Index(out, "dropped ")
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimRight(strings.Fields(out[i+len("dropped "):])[0], ","))
	return n
}

// do runs f on a thread inside the namespace: sockets f creates belong to
// it. The thread returns to the test's namespace afterwards (or, if that
// fails, is never reused: its goroutine keeps it locked, and Go ends such a
// thread with its goroutine).
func (ns *netns) do(t *testing.T, f func()) {
	goruntime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		goruntime.UnlockOSThread()
		t.Errorf("opening the thread's network namespace: %v", err)
		return
	}
	defer orig.Close()
	target, err := os.Open(ns.path)
	if err != nil {
		goruntime.UnlockOSThread()
		t.Errorf("opening %s: %v", ns.path, err)
		return
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		goruntime.UnlockOSThread()
		t.Errorf("entering %s: %v", ns.name, err)
		return
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Errorf("leaving %s: %v", ns.name, err)
			return // stay locked: the thread dies with its goroutine
		}
		goruntime.UnlockOSThread()
	}()
	f()
}
