//go:build race

package e2e

// raceEnabled builds the probed binary with the race detector too, so the
// end-to-end runs also check the agent for data races (a race makes the
// child exit with status 66, which the tests report).
const raceEnabled = true
