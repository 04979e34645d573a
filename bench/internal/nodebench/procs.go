package nodebench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/probed/probed/internal/procstat"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux).
const clockTicks = 100

// proc is one line of /proc/<pid>/stat.
type proc struct {
	pid, ppid  int
	comm       string
	self, kids time.Duration // utime+stime; cutime+cstime (reaped children)
}

// readProc reads /proc/<pid>/stat (false when the process is gone).
func readProc(pid int) (proc, bool) {
	s, ok := procstat.Read(pid)
	if !ok {
		return proc{}, false
	}
	return procOf(s), true
}

// procOf is a stat line with its times as durations.
func procOf(s procstat.Stat) proc {
	ticks := func(n uint64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return proc{pid: s.PID, ppid: s.PPID, comm: s.Comm, self: ticks(s.UTime + s.STime), kids: ticks(s.CUTime + s.CSTime)}
}

// allProcs reads every process of /proc.
func allProcs() []proc {
	stats := procstat.All()
	out := make([]proc, 0, len(stats))
	for _, s := range stats {
		out = append(out, procOf(s))
	}
	return out
}

// cmdline is the process's command line, arguments joined by spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// Node names the processes of the real node whose CPU a run measures.
type Node struct {
	Kubelet, Containerd int    // PIDs
	Socket              string // containerd's socket path: its shims name it (-address)
	APIServer, Etcd     int    // the node's control plane (reported apart, not in the node's total)
	Probed              int    // the prober's process (probed, the bare prober); 0 when none runs
}

// CPU is the CPU time of the node's parts at one moment (cumulative).
type CPU struct {
	Kubelet    time.Duration // the kubelet and the children it reaped
	Containerd time.Duration
	// Shims: every containerd shim of the node with the children it reaped:
	// runc (create, exec, kill) and the processes exec probes ran.
	Shims time.Duration
	// Pods: the containers' own processes (the shims' live descendants:
	// the pause and probe-target processes, a resident exec helper's
	// shells), with the children they reaped (a helper's per-run
	// processes).
	Pods   time.Duration
	Probed time.Duration
	// Control: the node's kube-apiserver and etcd (not part of the node).
	Control time.Duration
}

// Node is kubelet + containerd + shims + pods + probed: the whole node's
// CPU (the control plane excluded).
func (c CPU) Node() time.Duration { return c.Kubelet + c.Containerd + c.Shims + c.Pods + c.Probed }

// Sub is c − o, part by part.
func (c CPU) Sub(o CPU) CPU {
	return CPU{c.Kubelet - o.Kubelet, c.Containerd - o.Containerd, c.Shims - o.Shims, c.Pods - o.Pods, c.Probed - o.Probed, c.Control - o.Control}
}

// Sample reads the node's CPU now. Shims are found by their command line
// (-address SOCKET); the containers' processes are the shims' descendants.
func (n Node) Sample() CPU {
	procs := allProcs()
	return n.classify(procs, n.shims(procs))
}

// shims are the PIDs of the node's containerd shims among procs.
func (n Node) shims(procs []proc) map[int]bool {
	shims := map[int]bool{}
	for _, p := range procs {
		if strings.HasPrefix(p.comm, "containerd-shim") && strings.Contains(cmdline(p.pid), "-address "+n.Socket) {
			shims[p.pid] = true
		}
	}
	return shims
}

// ExecCounter returns a function that counts the node's runc processes
// running an exec now (their command line names runcRoot and "exec"):
// the shims' children (runc is started by the shim), the shims found
// once, the children seen at the start (the pods' processes) never read
// again. A scan of all of /proc per call instead cost the benchmark a
// quarter of a core at 50 calls a second (10 pods; measured).
func (n Node) ExecCounter(runcRoot string) func() int {
	shims := n.shims(allProcs())
	known := map[int]bool{}
	children := func(pid int) []int {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		var out []int
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
		return out
	}
	for pid := range shims {
		for _, c := range children(pid) {
			known[c] = true
		}
	}
	return func() int {
		count := 0
		for pid := range shims {
			for _, c := range children(pid) {
				if !known[c] && isRuncExec(c, runcRoot) {
					count++
				}
			}
		}
		return count
	}
}

// isRuncExec: pid is runc (not its runc:[2:INIT] child) running an exec
// of the node's runc root.
func isRuncExec(pid int, runcRoot string) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "runc" {
		return false
	}
	c := cmdline(pid)
	return strings.Contains(c, runcRoot) && strings.Contains(c, " exec ")
}

// classify sums procs into the node's parts. A shim counts with the
// children it reaped (runc, and the processes of ExecSync runs); every
// live descendant of a shim is the pods' — the pause and target processes,
// a resident exec helper's shells — each with the children it reaped (a
// helper's per-run processes), so a process that ended in the window is
// counted once, in the live parent that reaped it.
func (n Node) classify(procs []proc, shims map[int]bool) CPU {
	var c CPU
	parent := make(map[int]int, len(procs))
	for _, p := range procs {
		parent[p.pid] = p.ppid
	}
	// underShim: pid's parent chain reaches a shim (bounded: a chain
	// longer than the process table is a loop read mid-change).
	underShim := func(pid int) bool {
		for i, q := 0, parent[pid]; i < len(procs) && q > 1; i, q = i+1, parent[q] {
			if shims[q] {
				return true
			}
		}
		return false
	}
	for _, p := range procs {
		all := p.self + p.kids
		switch {
		case p.pid == n.Kubelet:
			c.Kubelet += all
		case p.pid == n.Containerd:
			c.Containerd += all
		case n.Probed != 0 && p.pid == n.Probed:
			c.Probed += all
		case p.pid == n.APIServer || p.pid == n.Etcd:
			c.Control += all
		case shims[p.pid]:
			c.Shims += all
		case underShim(p.pid):
			c.Pods += all
		}
	}
	return c
}

// ProcCPU is the user and system CPU time process pid has used (its own,
// not its reaped children's); false when it is gone.
func ProcCPU(pid int) (time.Duration, bool) {
	p, ok := readProc(pid)
	return p.self, ok
}

// ProcRSS is the resident set size of process pid in bytes (VmRSS of
// /proc/<pid>/status); 0 when it is gone.
func ProcRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
