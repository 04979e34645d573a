// Package faults holds fault-injection tests of the probe runtime: targets
// that misbehave (HTTP servers that hang, stall, stream, reset or loop; TCP
// ports that never complete a handshake; exec commands that ignore SIGTERM,
// fork, flood their output or cannot run) and a node that cannot keep up
// (more probe work than the pool can serve).
//
// Every test runs the real runtime (runtime.New with manager.RegisterBuiltins
// and the host exec runner) or the real manager (manager.New) against real
// servers, sockets and processes on loopback, and checks the verdict, the
// time the attempt took, the pool slots it held, and that it left nothing
// behind: no process, no socket on the prober's side, no goroutine.
//
// The tests are Linux-only (they read /proc) and run one at a time, since
// they measure wall time. The package has no code outside its tests.
package faults
