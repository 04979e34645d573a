package runtime

import (
	"errors"
	"syscall"
)

// A probe that cannot be attempted because the prober itself is out of a
// local resource — descriptors, socket buffers, ephemeral ports, memory,
// processes — says nothing about the target. The kubelet maps such a dial
// error to a Failure (its handlers turn every dial error into one), so a
// node out of descriptors restarts healthy containers. probed makes such a
// run errored instead (spec P5: not counted toward the thresholds, no result
// change, an Unhealthy "errored" event naming the cause), and counts it by
// reason (probed_probes_errored_total). This file is the one place the rule
// lives: Run applies it to every attempt of every handler, and the plugin
// SDK applies it inside plugins (ClassifyAttempt).

// localResourceErrnos are the errnos that mean "the prober is out of a
// local resource", with their names (the reason label of
// probed_probes_errored_total):
//
//   - EMFILE, ENFILE: the process's or the system's descriptor table is full
//     (socket(2), pipe(2), accept(2));
//   - ENOBUFS, ENOMEM: no kernel memory for a socket or a process;
//   - EADDRNOTAVAIL: connect(2) found no free local port in the ephemeral
//     range (or no local address of the target's family);
//   - EAGAIN: fork(2) hit RLIMIT_NPROC or the pids limit (os/exec), or
//     connect(2) found no routing cache entry.
var localResourceErrnos = [...]struct {
	errno syscall.Errno
	name  string
}{
	{syscall.EMFILE, "EMFILE"},
	{syscall.ENFILE, "ENFILE"},
	{syscall.ENOBUFS, "ENOBUFS"},
	{syscall.ENOMEM, "ENOMEM"},
	{syscall.EADDRNOTAVAIL, "EADDRNOTAVAIL"},
	{syscall.EAGAIN, "EAGAIN"},
}

// LocalResourceError is the error of an attempt the prober could not make
// for lack of its own resources (see localResourceErrnos). Its text says so
// and keeps the underlying error, e.g.
// "probe not attempted: probed is out of local resources (EMFILE): dial tcp
// 10.0.0.5:8080: socket: too many open files".
type LocalResourceError struct {
	// Errno is the errno found in Err's chain.
	Errno syscall.Errno
	// Reason is Errno's name ("EMFILE", ...).
	Reason string
	// Err is the handler's error (a *net.OpError, *os.PathError, ...).
	Err error
}

func (e *LocalResourceError) Error() string {
	return "probe not attempted: probed is out of local resources (" + e.Reason + "): " + e.Err.Error()
}

func (e *LocalResourceError) Unwrap() error { return e.Err }

// LocalResource reports whether err is, or wraps (through *net.OpError,
// *os.SyscallError, *os.PathError, *url.Error ...), one of the local
// resource errnos, and returns it as a *LocalResourceError (err itself when
// it already is one). It returns nil, false for a nil err and for every
// other error (refused, reset, timeout, unreachable ...: verdicts about the
// target).
func LocalResource(err error) (*LocalResourceError, bool) {
	if err == nil {
		return nil, false
	}
	var lre *LocalResourceError
	if errors.As(err, &lre) {
		return lre, true
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return nil, false
	}
	for _, e := range localResourceErrnos {
		if errno == e.errno {
			return &LocalResourceError{Errno: errno, Reason: e.name, Err: err}, true
		}
	}
	return nil, false
}

// ClassifyAttempt applies the local-resource rule to one attempt's result:
// an attempt whose error, or whose Failure's Cause, is a local-resource
// error (LocalResource) becomes errored — Result Unknown, the
// *LocalResourceError as the error, the output dropped — and anything else
// is returned unchanged. Run calls it on every attempt; a plugin's server
// (plugins/sdk) calls it before answering, so the rule holds across the
// process boundary.
func ClassifyAttempt(out Outcome, err error) (Outcome, error) {
	cause := err
	if cause == nil {
		if out.Result != Failure {
			return out, nil
		}
		cause = out.Cause
	}
	lre, ok := LocalResource(cause)
	if !ok {
		return out, err
	}
	return Outcome{Result: Unknown, ExitCode: -1}, lre
}

// ReasonHandlerError is the ErroredReason of an errored run whose error is
// not a local-resource error (a preparation error, a plugin that is down, a
// handler error).
const ReasonHandlerError = "handler_error"

// ErroredReason names why a run was errored, for the reason label of
// probed_probes_errored_total: the errno name of a local-resource error
// ("EMFILE", "ENFILE", "ENOBUFS", "ENOMEM", "EADDRNOTAVAIL", "EAGAIN"), or
// ReasonHandlerError for any other non-nil error; "" for nil.
func ErroredReason(err error) string {
	if err == nil {
		return ""
	}
	if lre, ok := LocalResource(err); ok {
		return lre.Reason
	}
	return ReasonHandlerError
}
