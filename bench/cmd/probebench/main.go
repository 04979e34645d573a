// Command probebench drives the kubelet's prober manager
// (k8s.io/kubernetes/pkg/kubelet/prober, v1.37.2) and probed's manager
// through the same scenarios and prints one JSON line per run.
//
//	probebench run -impl probed|kubelet|dialloop|getloop -mode instant|tcp|http|hung -pods N [...]
//	probebench suite -suite quick|full [-out DIR] [-doc FILE]
//	probebench report -in results.jsonl [-out DIR] [-doc FILE]
//	probebench breakdown -profile cpu.out -result run.json [...]
//	probebench node-report -in out/node.jsonl [-out DIR] [-doc FILE]
//
// "suite" re-executes this binary once per run ("run"), so each run is its
// own process and its RSS is its own; TCP and HTTP targets are served by
// yet another child ("targets") so that their CPU and memory are not
// counted against the prober.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probebench run|suite|report|breakdown|node-report|targets [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "targets":
		err = targetsMain(os.Args[2:])
	case "suite":
		err = suiteMain(os.Args[2:])
	case "report":
		err = reportMain(os.Args[2:])
	case "breakdown":
		err = breakdownMain(os.Args[2:])
	case "node-report":
		err = nodeReportMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probebench:", err)
		os.Exit(1)
	}
}
