package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// EnvMemoryLimit names the variable that carries the container's memory
// limit in bytes: the DaemonSet and the chart set it from the downward API
// (resourceFieldRef limits.memory).
const EnvMemoryLimit = "PROBED_MEMORY_LIMIT"

// memoryLimitShare is the part of the container's limit the Go runtime's
// soft limit is set to: the rest is room for what the runtime does not
// count (the kernel's page cache of the container, cgo, the binary), so the
// garbage collector works harder before the kernel's OOM killer would act.
const memoryLimitShare = 0.9

// applyMemoryLimit sets the Go runtime's soft memory limit
// (debug.SetMemoryLimit) to 90% of $PROBED_MEMORY_LIMIT, unless GOMEMLIMIT
// is set (the operator's explicit choice wins) or the variable is unset or
// zero. It returns the limit set in bytes (0: none), or an error naming the
// variable when its value is not a number of bytes.
func applyMemoryLimit(log *slog.Logger) (int64, error) {
	v := strings.TrimSpace(os.Getenv(EnvMemoryLimit))
	if v == "" || os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	bytes, err := strconv.ParseInt(v, 10, 64)
	if err != nil || bytes < 0 {
		return 0, fmt.Errorf("$%s %q: want the container's memory limit in bytes", EnvMemoryLimit, v)
	}
	if bytes == 0 {
		return 0, nil
	}
	limit := int64(float64(bytes) * memoryLimitShare)
	debug.SetMemoryLimit(limit)
	log.Info("Go memory limit set from the container's", "containerLimitBytes", bytes, "goMemLimitBytes", limit)
	return limit, nil
}
