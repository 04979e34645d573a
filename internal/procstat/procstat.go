// Package procstat reads a process's /proc/PID/stat line (proc(5)): the
// one parser of it for the exec runner's process-tree kill, the tests that
// check no process is left behind, and the benchmarks' CPU accounting.
// The command name sits in parentheses and may itself hold spaces and
// ')': the fields are read after the last ')'. Linux's /proc only; where
// there is none, Read fails and All is empty.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is the part of one /proc/PID/stat line probed reads.
type Stat struct {
	PID, PPID, PGID int
	// Comm is the command name (without its parentheses).
	Comm string
	// State is the one-letter state (R, S, D, Z, X, ...).
	State byte
	// UTime, STime, CUTime and CSTime are the process's user and system
	// CPU time and its reaped children's, in clock ticks (USER_HZ).
	UTime, STime, CUTime, CSTime uint64
	// Start is the start time in clock ticks since boot: with PID, the
	// process's identity across PID reuse.
	Start uint64
}

// Gone reports a zombie or a dead process: it runs nothing any more.
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// Parse reads one /proc/PID/stat line; false when it is not one.
func Parse(b []byte) (Stat, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return Stat{}, false
	}
	// After the command name: state(0) ppid(1) pgrp(2) ... utime(11)
	// stime(12) cutime(13) cstime(14) ... starttime(19).
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	num := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	return Stat{PID: pid, PPID: ppid, PGID: pgid, Comm: string(b[open+1 : end]), State: f[0][0],
		UTime: num(11), STime: num(12), CUTime: num(13), CSTime: num(14), Start: num(19)}, true
}

// Read reads the stat line of process pid; false when the process is gone
// (or the line is not one).
func Read(pid int) (Stat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, false
	}
	return Parse(b)
}

// All reads the stat line of every process of the machine; those that
// vanish while being read are skipped.
func All() []Stat {
	entries, _ := os.ReadDir("/proc")
	out := make([]Stat, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, ok := Read(pid); ok {
			out = append(out, s)
		}
	}
	return out
}
