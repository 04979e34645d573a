package sysstat

import (
	"os"
	"strconv"
	"strings"
)

// LoadAverage returns the host's 1, 5 and 15 minute load averages from
// /proc/loadavg (nil when it cannot be read): what else ran on the machine
// during a benchmark run.
func LoadAverage() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil
	}
	out := make([]float64, 3)
	for i := range out {
		if out[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return nil
		}
	}
	return out
}
