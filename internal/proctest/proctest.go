// Package proctest lists the machine's processes from /proc, for the tests
// that check that probes and plugins leave no process behind (BR-02,
// SIGTERM, faults). Linux only.
package proctest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	out := make([]Proc, 0, len(dirs))
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces and ')': the
		// fields start after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 20 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		start, _ := strconv.ParseUint(f[19], 10, 64)
		cmdline, _ := os.ReadFile(d + "/cmdline")
		out = append(out, Proc{PID: pid, PPID: ppid, PGID: pgid, State: f[0][0], Start: start,
			Cmd: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))})
	}
	return out
}
