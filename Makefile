# make run       the coordinator on the embedded memory store (no Redis needed)
# make test      go vet and every test (Go with -race, the image's, Python, TypeScript), against a throwaway Redis
#                and, for the housekeeper's storage tasks, a throwaway FerretDB (a MongoDB wire protocol, built
#                once from the Go module proxy by scripts/ferretdb.sh and cached)
# make test-under-load  the suite three times with every core kept busy
# make fault-soak the fault suite (kill -9, Redis restarts, flushes, failovers, Cluster slot moves), five rounds of each
# make bench     the benchmarks, side by side in one run
# make fuzz      every fuzz target for FUZZTIME (5m) each, one after the other, then the long runs
#                (the model-based check of the memory store: MODELOPS, 10 million operations)
# make lint      gofmt, golangci-lint, the Python client's pyright --strict and flake8
#                (scripts/lint-python.sh), the TypeScript client's tsc and eslint
#                (scripts/lint-typescript.sh), buf lint/format/breaking, gen/ (and the Python package's
#                generated code) up to date, no tracked binaries,
#                helm lint/template and the chart test (deploy/helm/charttest)
# make generate  regenerate gen/ (Go, TypeScript) and the Python package's generated code from proto/
#                with the pinned buf and plugins
# make image     the container image (IMAGE=coordinator:VERSION), from binaries built here, with podman

GO            ?= go
BUF           := $(GO) tool -modfile=$(CURDIR)/tools/go.mod buf
GOLANGCI_LINT := $(GO) tool -modfile=$(CURDIR)/tools/go.mod golangci-lint
HELM          := $(GO) tool -modfile=$(CURDIR)/tools/go.mod helm
BENCHFLAGS    ?=
FUZZTIME      ?= 5m
VERSION       := $(shell cat VERSION)
IMAGE         ?= coordinator:$(VERSION)
CHART         := deploy/helm/coordinator
# The Python package's generated code (buf.gen.yaml writes it there).
PYGEN         := client/python/coordinator/_generated

.PHONY: run test test-go test-image test-python test-typescript test-under-load fault-soak bench fuzz lint generate build image

# Built, then exec'd, so that Ctrl-C reaches the coordinator alone and a
# clean stop exits 0 (`go run` reports an interrupted child as a failure).
run:
	@mkdir -p bin
	$(GO) build -ldflags "-X github.com/coordinator-dev/coordinator/internal/app.release=$(VERSION)" -o bin/coordinator ./cmd/coordinator
	@exec ./bin/coordinator

build:
	$(GO) build ./...

# The Dockerfile's final stage, from static binaries built here
# (scripts/image.sh; PODMAN=podman to use your podman's usual storage).
image:
	./scripts/image.sh $(IMAGE)

test: test-go test-image test-python test-typescript

test-go:
	$(GO) vet ./...
	./scripts/with-redis.sh ./scripts/with-ferretdb.sh $(GO) test -race -count=1 ./...

# The image test (deploy/image_test.go) on its own, after the others: it
# builds the image, which would load the machine under timing-sensitive
# tests. It skips without podman, except in CI.
test-image:
	COORDINATOR_TEST_IMAGE=1 ./scripts/with-redis.sh $(GO) test -count=1 -run '^TestImage$$' ./deploy/

test-python:
	./scripts/with-redis.sh ./scripts/test-python.sh

test-typescript:
	./scripts/with-redis.sh ./scripts/test-typescript.sh

# The suite three times in a row beside a CPU hog on every core: what a
# loaded CI machine does to timing-dependent tests.
test-under-load:
	./scripts/test-under-load.sh 3

# The fault suite of make test, each fault striking five times in a row.
fault-soak:
	COORDINATOR_FAULT_ROUNDS=5 ./scripts/with-redis.sh ./scripts/with-ferretdb.sh $(GO) test -race -count=1 -timeout 60m -run TestFaults -v ./cmd/coordinator/

# bench/ is a module of its own (the peers it measures are no dependency of
# the SDK); relative file flags (-json, -cpuprofile) are relative to bench/.
bench:
	cd bench && ../scripts/with-redis.sh ../scripts/with-ferretdb.sh $(GO) run . $(BENCHFLAGS)

# The targets and the settings (FUZZPARALLEL, FUZZMINIMIZETIME) are in
# scripts/fuzz.sh; a failing input lands in the package's testdata/fuzz/.
fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# Go first: buf.gen.go.yaml cleans all of gen/, then buf.gen.yaml writes
# gen/typescript and the Python package's client/python/coordinator/_generated.
generate:
	./scripts/generators.sh
	$(BUF) generate --template buf.gen.go.yaml
	$(BUF) generate

lint:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	./scripts/check-no-binaries.sh
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	cd bench && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	./scripts/lint-python.sh
	./scripts/lint-typescript.sh
	$(BUF) lint
	$(BUF) format --diff --exit-code
	./scripts/buf-breaking.sh
	./scripts/generators.sh
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(BUF) generate --template buf.gen.go.yaml -o $$tmp && $(BUF) generate -o $$tmp && diff -r gen $$tmp/gen && diff -r $(PYGEN) $$tmp/$(PYGEN) || { echo "gen/ or $(PYGEN) is stale: run 'make generate' and commit it"; exit 1; }
	$(HELM) lint --strict $(CHART)
	@for f in deploy/helm/charttest/testdata/*.yaml; do echo "helm lint --strict -f $$f"; $(HELM) lint --strict --quiet $(CHART) -f $$f || exit 1; done
	$(HELM) template coordinator $(CHART) >/dev/null
	cd deploy/helm/charttest && $(GO) vet ./... && $(GOLANGCI_LINT) run --config ../../../.golangci.yml ./...
	cd deploy/helm/charttest && $(GO) test -count=1 ./...
