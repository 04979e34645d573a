package micro

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/bench/internal/sysstat"
)

// BenchmarkTCPClose: what a tcpSocket probe's close costs (which close keeps
// the kubelet's verdicts at the least cost):
// one op is a probe of a loopback target — connect, close — with the
// target's accept and close in the same process, so cpu-ns/op is the
// node's CPU for both ends (on loopback the kernel does the peer's
// packet work in the sender's context anyway). Closes:
//
//   - rst: SO_LINGER {on, 0}, probed's dialer (plugins/internal/dialer):
//     an RST, no TIME-WAIT;
//   - linger1s: SO_LINGER {on, 1 s}, the kubelet's probe dialer (H3, T1):
//     a FIN, close(2) waits for it to be acked, the prober's socket stays
//     in TIME-WAIT;
//   - fin: a plain close: a FIN, TIME-WAIT.
//
// Targets: "closes" accepts and closes at once (the node's probe target,
// internal/probetarget ServeTCP); "waits" accepts and reads until the
// prober closes (the harness's targets). timewait/op is the TIME-WAIT
// sockets of the target's port left per op (either side). The verdict is
// the connect's in every case (T1: Success when it connects; the close
// changes nothing the prober sees).
//
//	cd bench && go test -run '^$' -bench TCPClose -benchtime 10000x -count 3 ./micro
func BenchmarkTCPClose(b *testing.B) {
	for _, target := range []string{"closes", "waits"} {
		for _, c := range []struct {
			name   string
			linger *syscall.Linger
		}{
			{"rst", &syscall.Linger{Onoff: 1, Linger: 0}},
			{"linger1s", &syscall.Linger{Onoff: 1, Linger: 1}},
			{"fin", nil},
		} {
			b.Run(target+"/"+c.name, func(b *testing.B) { benchTCPClose(b, target == "waits", c.linger) })
		}
	}
}

func benchTCPClose(b *testing.B, waits bool, linger *syscall.Linger) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !waits {
				c.Close()
				continue
			}
			wg.Go(func() {
				_, _ = io.Copy(io.Discard, c) // until the prober's FIN or RST
				c.Close()
			})
		}
	})
	d := &net.Dialer{Timeout: time.Second, KeepAlive: -1}
	if linger != nil {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, linger)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	addr := l.Addr().String()
	_, tw0, sw0 := sysstat.TimeWait(port)
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRNOTAVAIL) {
				b.Fatalf("out of ephemeral ports (TIME-WAIT): %v", err)
			}
			b.Fatal(err)
		}
		c.Close()
	}
	cpu := processCPU() - cpu0
	b.StopTimer()
	_, tw1, sw1 := sysstat.TimeWait(port)
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(tw1-tw0+sw1-sw0)/float64(b.N), "timewait/op")
	l.Close()
	wg.Wait()
}
