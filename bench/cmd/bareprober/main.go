// Command bareprober is the bare prober (bench/internal/bare) as a process
// of its own: the third side of the real node's benchmark (bench/node),
// probing the same pods as the kubelet and probed with nothing but the
// probes — a goroutine and a ticker per probe, a plain GET with keep-alives
// off, a plain dial and close.
//
//	bareprober -probes probes.json -listen 127.0.0.1:PORT
//
// probes.json is a JSON list of bare.Probe ({"url": ...} or {"addr": ...},
// "period" and "timeout" in nanoseconds). GET /counts on the listen address
// answers {"ok": N, "failed": M}, the runs so far; SIGTERM or SIGINT stops
// it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/probed/probed/bench/internal/bare"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bareprober:", err)
		os.Exit(1)
	}
}

func run() error {
	probesFile := flag.String("probes", "", "JSON list of probes (bare.Probe)")
	listen := flag.String("listen", "127.0.0.1:0", "address of GET /counts")
	flag.Parse()
	b, err := os.ReadFile(*probesFile)
	if err != nil {
		return err
	}
	var probes []bare.Probe
	if err := json.Unmarshal(b, &probes); err != nil {
		return fmt.Errorf("%s: %w", *probesFile, err)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	p := bare.New()
	for i, pr := range probes {
		if pr.Period <= 0 || pr.Timeout <= 0 {
			return fmt.Errorf("%s: probe %d: period and timeout must be positive", *probesFile, i)
		}
		p.Start(i, pr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, _ *http.Request) {
		ok, failed := p.Counts()
		_ = json.NewEncoder(w).Encode(map[string]int64{"ok": ok, "failed": failed})
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	fmt.Printf("LISTEN %s\n", l.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = srv.Close()
	p.Stop()
	return nil
}
