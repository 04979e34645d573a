# probed — build, test and run targets. `make test` is the test command of
# README.md and of CI (.ci/run).
GO      ?= go
PKGS    ?= ./...
# VERSION, when given (make build VERSION=v1.2.3), is the version the binary
# reports; without it the Go toolchain's build information decides: in a git
# checkout the tag or a pseudo-version, the commit and whether the tree was
# modified (internal/version).
VERSION ?=
LDFLAGS := $(if $(VERSION),-X github.com/probed/probed/internal/version.version=$(VERSION))

.PHONY: all build image test test-binaries test-short vet fmt-check run check-examples clean generate

all: build

# bin/probed, with the commit recorded (-buildvcs=true: it fails outside a
# git checkout; build there with `make build GOFLAGS=-buildvcs=false`).
build:
	$(GO) build -buildvcs=true -ldflags "$(LDFLAGS)" -o bin/probed ./cmd/probed

# bin/probed-image.tar: probed's node-agent image without a container engine
# (deploy/image): the static binary (the Containerfile's build line) on an
# empty base with CA certificates and the user 65532, an OCI layout archive
# named $(IMAGE) that `ctr -n k8s.io images import` loads (docs/cluster.md
# "Install"). IMAGE defaults to the chart's appVersion, the tag the chart and
# deploy/kubernetes use; a release pushes with
# `go run ./cmd/probed-image -binary bin/image/probed -push REGISTRY/probed:TAG`.
APP_VERSION := $(shell sed -n 's/^appVersion: "\(.*\)"$$/\1/p' deploy/helm/probed/Chart.yaml)
IMAGE ?= ghcr.io/probed/probed:$(APP_VERSION)
image:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/image/probed ./cmd/probed
	$(GO) run ./cmd/probed-image -binary bin/image/probed -name $(IMAGE) -version "$(or $(VERSION),$(APP_VERSION))" -o bin/probed-image.tar

# The full test suite: vet, gofmt, and every test under the race detector.
# The end-to-end packages run the probed binaries test-binaries builds once
# (internal/probedbin reads their paths from the environment).
TEST_BIN ?= $(CURDIR)/bin/test
test: vet fmt-check test-binaries
	PROBED_TEST_BINARY=$(TEST_BIN)/probed-race PROBED_TEST_BINARY_NORACE=$(TEST_BIN)/probed \
		$(GO) test -race -count=1 -timeout 30m $(PKGS)

test-binaries:
	$(GO) build -race -o $(TEST_BIN)/probed-race ./cmd/probed
	$(GO) build -o $(TEST_BIN)/probed ./cmd/probed

# The quick loop (README): no race detector, and -short: the end-to-end
# packages, the tests that build the binary and the long timing tests
# skip. `make test` (CI) runs everything.
test-short:
	$(GO) test -count=1 -short $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The main job on the bundled examples (stops after 60 s; drop --for to keep it running).
run: build
	./bin/probed run --allow-host-exec --for 60s

check-examples: build
	for f in examples/manifests/*.yaml; do ./bin/probed check -f $$f --allow-host-exec; done

clean:
	rm -rf bin

# Regenerates the plugin contract's Go code (runtime/pluginproto/probeplugin/v1)
# from its .proto. Needs protoc on PATH and the well-known .proto files (Debian: apt-get install -y libprotobuf-dev
# protobuf-compiler); protoc-gen-go and protoc-gen-go-grpc are the versions
# pinned by the tool directives of go.mod, built into bin/.
PROTO_DIR := runtime/pluginproto
generate:
	@command -v protoc >/dev/null || { echo "generate: protoc not found on PATH (apt-get install -y protobuf-compiler)"; exit 1; }
	$(GO) build -o bin/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc --plugin=protoc-gen-go=bin/protoc-gen-go --plugin=protoc-gen-go-grpc=bin/protoc-gen-go-grpc \
		-I $(PROTO_DIR) \
		--go_out=$(PROTO_DIR) --go_opt=paths=source_relative \
		--go-grpc_out=$(PROTO_DIR) --go-grpc_opt=paths=source_relative \
		probeplugin/v1/probeplugin.proto

# Benchmarks against the kubelet's prober manager (bench/, its own module;
# docs/benchmarks.md). `bench` is the quick suite (under 5 minutes: 2k, 10k
# and 40k probes/s with the instant handler, both implementations, plus the
# burst run); `bench-full` runs every scenario (about 30 minutes). Both
# rewrite their section of docs/benchmarks.md and its plot; raw JSON lines
# go to bench/out/.
# `bench-density` runs issue 13's targets (each implementation at rest
# with no pod, the baseline of the flat-cost line; 2k–100k instant
# probes/s, both implementations; 1M probes at period 10 s; TCP saturation
# against the bare dial loop, HTTP saturation against the bare GET loop;
# about 14 minutes). Every suite starts with the two baseline runs.
# `bench-profile` takes CPU profiles of
# the 40k and 100k probes/s instant runs of both implementations and
# prints their breakdown by cost centre (about 4 minutes; profiles and
# JSON lines in bench/out/profile/).
.PHONY: bench bench-full bench-subsec bench-density bench-profile bench-build bench-cri bench-node

bench-build:
	cd bench && $(GO) build -o ../bin/probebench ./cmd/probebench

bench: bench-build
	cd bench && ../bin/probebench suite -suite quick -out out -doc ../docs/benchmarks.md

bench-full: bench-build
	cd bench && ../bin/probebench suite -suite full -out out -doc ../docs/benchmarks.md

# Sub-second periods (probed only, annotation probes at 100 ms): 10,000
# instant probes and 1,000 real TCP probes; about 1 minute. Rewrites the
# "subsec" section of docs/benchmarks.md.
bench-subsec: bench-build
	cd bench && ../bin/probebench suite -suite subsec -out out -doc ../docs/benchmarks.md

bench-density: bench-build
	cd bench && ../bin/probebench suite -suite density -out out -doc ../docs/benchmarks.md

# Exec probes through a real containerd (issue 19; docs/benchmarks.md "Exec
# probes through the container runtime"): needs PROBED_TEST_CRI_ENDPOINT from
# test/cri/env.sh start; about 6.5 minutes (3 ways, 3 sizes, 30 s windows).
bench-cri:
	cd bench && $(GO) test -run '^$$' -bench ExecProbes -benchtime 1x -timeout 30m ./cri

# The real node (issues 20 and 28; docs/benchmarks.md "The real node"): the
# same pods with the kubelet's spec probes, probed's annotation probes (by
# default, without its window and with --http-keep-alive; exec through
# ExecSync and through resident helpers), the bare prober and no probe,
# HTTP/TCP and exec; needs PROBED_TEST_NODE from test/node/env.sh start and
# the node to itself. About 2 hours with the default pod counts and sides;
# rewrites the "node" section of docs/benchmarks.md and its plot.
bench-node:
	cd bench && $(GO) test -run '^$$' -bench NodeDensity -benchtime 1x -timeout 4h ./node
	cd bench && $(GO) run ./cmd/probebench node-report -in out/node.jsonl -doc ../docs/benchmarks.md

PROFILE_DIR    ?= bench/out/profile
PROFILE_PODS   ?= 20000 50000
PROFILE_WINDOW ?= 15s
bench-profile: bench-build
	mkdir -p $(PROFILE_DIR)
	set -e; args=""; for impl in probed kubelet; do for pods in $(PROFILE_PODS); do \
		n=$$(( pods * 2 / 1000 ))k; \
		./bin/probebench run -impl $$impl -pods $$pods -window $(PROFILE_WINDOW) -cpuprofile $(PROFILE_DIR)/cpu-$$impl-$$n.out > $(PROFILE_DIR)/run-$$impl-$$n.json; \
		args="$$args -profile $(PROFILE_DIR)/cpu-$$impl-$$n.out -result $(PROFILE_DIR)/run-$$impl-$$n.json"; \
	done; done; ./bin/probebench breakdown $$args | tee $(PROFILE_DIR)/breakdown.md
