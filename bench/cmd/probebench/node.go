package main

import (
	"flag"

	"github.com/probed/probed/bench/internal/nodebench"
)

// nodeSection names the generated section of docs/benchmarks.md and its plot.
const nodeSection = "node"

// nodeReportMain renders the real node's density runs (bench/node, JSON
// lines) into <out>/node.md and <out>/node.png and, with -doc, the
// document's "node" section and benchmarks-node.png beside it.
func nodeReportMain(args []string) error {
	fs := flag.NewFlagSet("node-report", flag.ExitOnError)
	in := fs.String("in", "out/node.jsonl", "JSON lines of bench/node")
	outDir := fs.String("out", "out", "directory for the table and plot")
	doc := fs.String("doc", "", "markdown file whose generated section to rewrite")
	cmdline := fs.String("cmd", "make bench-node", "the command that produced the results")
	_ = fs.Parse(args)
	results, err := nodebench.Read(*in)
	if err != nil {
		return err
	}
	return publish(nodeSection, *outDir, *doc,
		func(path string) error { return nodebench.Plot(results, path) },
		func(img string) string {
			return nodebench.Render(results, nodebench.Header(*cmdline, machine(), results), img)
		})
}
