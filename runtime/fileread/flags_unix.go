//go:build unix

package fileread

import "syscall"

// openFlags: do not wait for a FIFO's writer, and never make a terminal
// the agent's controlling terminal.
const openFlags = syscall.O_NONBLOCK | syscall.O_NOCTTY
