// Command probe-target is the container of the real node's tests and density
// benchmark (test/node/env.sh builds it static into the node's image beside
// busybox): internal/probetarget's server on the node's ports (pods are
// hostNetwork).
//
//	probe-target -http PORT [-tcp PORT] [-state DIR] [-ready-file FILE]
//
// It runs until SIGTERM or SIGINT, then records the instance in the state
// directory (probetarget.Server.Stop) and exits 0.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/probed/probed/internal/probetarget"
)

func main() {
	httpPort := flag.Int("http", 0, "HTTP port (required)")
	tcpPort := flag.Int("tcp", 0, "TCP port (0: none)")
	state := flag.String("state", "", "shared state directory: statuses that outlive the instance, the instances log")
	readyFile := flag.String("ready-file", "", "a file written at start, for exec probes that read it")
	flag.Parse()
	if *httpPort == 0 {
		log.Fatal("probe-target: -http PORT is required")
	}
	s, err := probetarget.New(probetarget.Options{State: *state, ReadyFile: *readyFile})
	if err != nil {
		log.Fatalf("probe-target: %v", err)
	}
	hl, err := net.Listen("tcp", ":"+strconv.Itoa(*httpPort))
	if err != nil {
		log.Fatalf("probe-target: -http: %v", err)
	}
	go func() {
		srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
		log.Fatalf("probe-target: %v", srv.Serve(hl))
	}()
	if *tcpPort != 0 {
		tl, err := net.Listen("tcp", ":"+strconv.Itoa(*tcpPort))
		if err != nil {
			log.Fatalf("probe-target: -tcp: %v", err)
		}
		go func() { log.Fatalf("probe-target: %v", s.ServeTCP(tl)) }()
	}
	log.Printf("probe-target: pid %d, http :%d, tcp :%d", os.Getpid(), *httpPort, *tcpPort)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	if err := s.Stop(); err != nil {
		log.Printf("probe-target: %v", err)
	}
}
