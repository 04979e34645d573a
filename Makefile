# probed — build, test and run targets. `make test` is the test command of
# README.md and of CI (.ci/run).
GO      ?= go
PKGS    ?= ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build test test-short vet fmt-check run check-examples clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/probed ./cmd/probed

# The full test suite: vet, gofmt, and every test under the race detector.
test: vet fmt-check
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

# Without the race detector, for a quick loop.
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
