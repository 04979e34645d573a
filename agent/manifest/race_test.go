//go:build race

package manifest

// raceEnabled slows the time bounds of tests down to the race detector's pace.
const raceEnabled = true
