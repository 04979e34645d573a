//go:build race

package pluginhosttest

// RaceEnabled reports whether this binary was built with -race.
const RaceEnabled = true
