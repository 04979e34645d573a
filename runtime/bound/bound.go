// Package bound holds the lengths probed cuts text to, and the cut itself.
// A probe's target text, a message a target answers with, a path, a
// header, a plugin parameter, an annotation: each comes from a manifest or
// a target, so from whoever wrote that manifest or runs that target, and
// each is cut wherever probed keeps it (history, the event ring, the
// report of rejected manifests) or prints it (logs, Events, the status
// page), so that no pod and no target can make the agent's memory, its log
// or its API grow with what it sends (one pod with a 250 KB
// path at 100 ms wrote 74 MiB of log in 30 s). docs/operations.md
// ("Bounds") lists the lengths and where each applies.
//
// The pod objects themselves (GET /pods, the pod's JSON) are served as the
// source gave them: they are bounded where they enter, by the API server's
// limits in cluster mode and by the manifest size limit (8 MiB) and the
// annotation limit (256 KiB) in manifest mode.
package bound

import (
	"strconv"
	"unicode/utf8"
)

// The stated lengths, in bytes.
const (
	// MessageBytes bounds a message: a probe run's output or error as the
	// history, the event ring, Events, logs and spans keep it, an event's
	// message, a manifest's error. 1 KiB, the note of an
	// events.k8s.io/v1 Event (the API server refuses longer ones).
	MessageBytes = 1024
	// TargetBytes bounds a probe's target as the status page and logs show
	// it ("GET http://10.0.0.1:8080/healthz?…").
	TargetBytes = 512
	// LogValueBytes bounds every string of a log line: the message and
	// each string, error and Stringer attribute.
	LogValueBytes = 2048
	// AnnotationBytes bounds an annotation's value as the pod's page shows
	// it (the whole value is in the pod's JSON).
	AnnotationBytes = 4096
)

// minCut is the smallest length Cut honours: room for both ends and the
// marker.
const minCut = 64

// Cut returns s when it is at most n bytes long; otherwise the start and
// the end of s with the middle replaced by "…[N bytes cut]…", n bytes in
// all (at least 64), cut at UTF-8 character boundaries. Both ends are kept
// because an error says what it tried at the start (`Get "http://…`) and
// what happened at the end (`connect: connection refused`).
func Cut(s string, n int) string {
	n = max(n, minCut)
	if len(s) <= n {
		return s
	}
	// The marker's length depends on the count it shows; the count is at
	// most len(s), so size the marker for that.
	marker := len("…[") + len(strconv.Itoa(len(s))) + len(" bytes cut]…")
	keep := n - marker
	head := keep * 3 / 5
	tail := keep - head
	h := head
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	t := len(s) - tail
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return s[:h] + "…[" + strconv.Itoa(t-h) + " bytes cut]…" + s[t:]
}

// Error returns err with its message cut to n bytes (Cut); errors.Is and
// errors.As still see err. A nil err, or one whose message is short
// enough, is returned as it is.
func Error(err error, n int) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if len(msg) <= max(n, minCut) {
		return err
	}
	return &cutError{msg: Cut(msg, n), err: err}
}

type cutError struct {
	msg string
	err error
}

func (e *cutError) Error() string { return e.msg }
func (e *cutError) Unwrap() error { return e.err }
