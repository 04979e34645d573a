// Package sysstat reads the process and socket figures of the benchmark
// from the kernel: CPU time (getrusage), resident set size, and TCP
// sockets by state from /proc/net/tcp{,6}, and the host's load average.
package sysstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// CPU returns the user and system CPU time of this process so far.
func CPU() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// Switches returns the context switches of this process so far: voluntary
// (a thread blocked: it slept in epoll_wait, futex or a read, and was woken
// later: about one per wake-up of an idle thread) and involuntary (the
// kernel took the CPU from a running thread).
func Switches() (voluntary, involuntary int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return ru.Nvcsw, ru.Nivcsw
}

// RSS returns the resident set size of this process in bytes (VmRSS).
func RSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return pages * int64(os.Getpagesize())
}

// Mem is a snapshot of the Go runtime's memory after a forced GC.
type Mem struct {
	RSS        int64 // resident set size, read before the GC
	HeapAlloc  int64 // live heap objects after GC
	HeapInuse  int64
	StackInuse int64
	Sys        int64
	Goroutines int
}

// Snapshot reads RSS, then forces a GC and reads the runtime's figures.
func Snapshot() Mem {
	rss := RSS()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Mem{
		RSS:        rss,
		HeapAlloc:  int64(ms.HeapAlloc),
		HeapInuse:  int64(ms.HeapInuse),
		StackInuse: int64(ms.StackInuse),
		Sys:        int64(ms.Sys),
		Goroutines: runtime.NumGoroutine(),
	}
}

// TCPStates counts the sockets of /proc/net/tcp and /proc/net/tcp6 by
// state (the hex "st" column: "06" is TIME-WAIT, "01" ESTABLISHED, ...).
func TCPStates() map[string]int {
	out := map[string]int{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		first := true
		for sc.Scan() {
			if first {
				first = false
				continue
			}
			fields := bytes.Fields(sc.Bytes())
			if len(fields) > 3 {
				out[string(fields[3])]++
			}
		}
		fh.Close()
	}
	return out
}

// TimeWait returns the number of TCP sockets in TIME-WAIT on this host:
// all of them, those whose remote port is one of ports (the probers' side
// of connections to the targets) and those whose local port is one of
// ports (the targets' side).
func TimeWait(ports ...int) (all, client, server int) {
	want := map[string]bool{}
	for _, p := range ports {
		want[fmt.Sprintf("%04X", p)] = true
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			fields := bytes.Fields(sc.Bytes())
			if len(fields) < 4 || string(fields[3]) != "06" {
				continue
			}
			all++
			port := func(addr []byte) string {
				if i := bytes.LastIndexByte(addr, ':'); i >= 0 {
					return string(addr[i+1:])
				}
				return ""
			}
			if want[port(fields[2])] {
				client++
			}
			if want[port(fields[1])] {
				server++
			}
		}
		fh.Close()
	}
	return all, client, server
}
