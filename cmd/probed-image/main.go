// Command probed-image builds probed's node-agent image from a static probed
// binary without a container engine (package deploy/image) and writes it as
// an archive `ctr images import` loads, or pushes it to a registry.
//
//	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/image/probed ./cmd/probed
//	go run ./cmd/probed-image -binary bin/image/probed -name ghcr.io/probed/probed:0.1.0 -o bin/probed-image.tar
//	go run ./cmd/probed-image -binary bin/image/probed -push ghcr.io/probed/probed:v0.2.0
//
// `make image` runs the first two lines. Flag errors exit 2, a failed build,
// write or push exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/probed/probed/deploy/image"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("probed-image", flag.ContinueOnError)
	fl.SetOutput(stderr)
	binary := fl.String("binary", "", "the static probed binary (CGO_ENABLED=0) to put in the image")
	ref := fl.String("name", "ghcr.io/probed/probed:dev", "the image's name in the archive (what `ctr images import` names it)")
	out := fl.String("o", "", "write the image as an OCI layout tar archive to this file")
	push := fl.String("push", "", "push the image to this reference (credentials of ~/.docker/config.json or $DOCKER_CONFIG)")
	version := fl.String("version", "", "the org.opencontainers.image.version label")
	arch := fl.String("arch", runtime.GOARCH, "the binary's architecture (GOARCH)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *binary == "" || (*out == "" && *push == "") || fl.NArg() > 0 {
		fmt.Fprintln(stderr, "probed-image: -binary and at least one of -o and -push are needed")
		return 2
	}
	img, err := image.Build(image.Options{Binary: *binary, Version: *version, OS: "linux", Architecture: *arch})
	if err != nil {
		fmt.Fprintln(stderr, "probed-image:", err)
		return 1
	}
	digest, err := img.Digest()
	if err != nil {
		fmt.Fprintln(stderr, "probed-image:", err)
		return 1
	}
	if *out != "" {
		if err := writeFile(*out, func(w io.Writer) error { return image.WriteArchive(w, img, *ref) }); err != nil {
			fmt.Fprintln(stderr, "probed-image:", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: %s %s\n", *out, *ref, digest)
	}
	if *push != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if _, err := image.Push(ctx, img, *push); err != nil {
			fmt.Fprintln(stderr, "probed-image:", err)
			return 1
		}
		fmt.Fprintf(stdout, "pushed %s@%s\n", *push, digest)
	}
	return 0
}

// writeFile writes through write into a temporary file beside path and
// renames it: a failed build leaves no half archive.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".probed-image-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
