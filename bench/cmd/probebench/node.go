package main

import (
	"flag"
	"os"
	"path/filepath"

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
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	png := filepath.Join(*outDir, nodeSection+".png")
	if err := nodebench.Plot(results, png); err != nil {
		return err
	}
	img := nodeSection + ".png"
	if *doc != "" {
		img = "benchmarks-" + nodeSection + ".png"
		b, err := os.ReadFile(png)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(*doc), img), b, 0o644); err != nil {
			return err
		}
	}
	md := nodebench.Render(results, nodebench.Header(*cmdline, machine(), results), img)
	if err := os.WriteFile(filepath.Join(*outDir, nodeSection+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	if *doc == "" {
		return nil
	}
	return rewriteSection(*doc, nodeSection, md)
}
