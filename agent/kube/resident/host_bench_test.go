package resident_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probed/probed/agent/kube/resident"
)

// BenchmarkHostRun is one exec run (true) through a helper on this host,
// per shell: the CPU per run of the helper's processes (with the commands
// they ran and reaped) and of the probing process. The figures of a real
// container are bench/cri's (docs/benchmarks.md).
func BenchmarkHostRun(b *testing.B) {
	t := &testing.T{}
	for name, shell := range shells(t) {
		b.Run(name, func(b *testing.B) {
			e := newHostEnv(&testing.T{}, shell, resident.Options{})
			defer e.runner.Close(context.Background())
			warmB(b, e)
			procs := e.rt.helperProcs(&testing.T{})
			h0, s0 := procsCPU(procs), selfCPU()
			b.ResetTimer()
			for range b.N {
				if _, err := e.runner.RunInContainer(context.Background(), "host://a", []string{"true"}, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			h1, s1 := procsCPU(procs), selfCPU()
			b.ReportMetric(float64(h1-h0)/float64(time.Millisecond)/float64(b.N), "helper-cpu-ms/run")
			b.ReportMetric(float64(s1-s0)/float64(time.Millisecond)/float64(b.N), "self-cpu-ms/run")
		})
	}
}

func warmB(b *testing.B, e *hostEnv) {
	deadline := time.Now().Add(10 * time.Second)
	for e.runner.Mode("host://a") != resident.ModeResident {
		if _, err := e.runner.RunInContainer(context.Background(), "host://a", []string{"true"}, time.Second); err != nil {
			b.Fatal(err)
		}
		if time.Now().After(deadline) {
			b.Fatal("no helper")
		}
	}
}

// procsCPU is utime+stime+cutime+cstime of pids.
func procsCPU(pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(s)[strings.LastIndexByte(string(s), ')')+2:])
		for _, i := range []int{11, 12, 13, 14} {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
