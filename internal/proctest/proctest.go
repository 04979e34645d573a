// Package proctest lists the machine's processes from /proc, for the tests
// that check that probes and plugins leave no process behind (BR-02,
// SIGTERM, faults). Linux only.
package proctest

import (
	"fmt"
	"os"
	"strings"

	"github.com/probed/probed/internal/procstat"
)

// Proc is one process as /proc/PID/stat and /proc/PID/cmdline show it.
type Proc struct {
	PID, PPID, PGID int
	// State is the one-letter state (R, S, D, Z, ...).
	State byte
	// Start is the start time in clock ticks since boot: with PID, the
	// process's identity across PID reuse.
	Start uint64
	// Cmd is the command line, arguments joined by spaces.
	Cmd string
}

// List returns the processes of the machine; those that vanish while being
// read are skipped.
func List() []Proc {
	stats := procstat.All()
	out := make([]Proc, 0, len(stats))
	for _, s := range stats {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.PID))
		out = append(out, Proc{PID: s.PID, PPID: s.PPID, PGID: s.PGID, State: s.State, Start: s.Start,
			Cmd: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))})
	}
	return out
}
