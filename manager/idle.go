package manager

// Idle reports whether a Manager built by New has caught up with its clock —
// every scheduler shard has processed the clock's current tick, or its
// wheel sleeps until a later tick with nothing due before it — and has no
// probe run queued or in flight. It is false for any other implementation.
//
// Code that drives a manager with a fake clock (k8s.io/utils/clock/testing)
// polls it after each step to wait for the runs the step made due: the
// scheduler's figures in StatsOf alone cannot tell a step whose tick has not
// been processed yet from one that made nothing due.
func Idle(mgr Manager) bool {
	m, ok := mgr.(*manager)
	if !ok {
		return false
	}
	return m.sched.Idle()
}
