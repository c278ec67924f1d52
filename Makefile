# make run       the coordinator on the embedded memory store (no Redis needed)
# make test      go vet and every test with -race, against a throwaway Redis
# make bench     the benchmarks, side by side in one run
# make lint      gofmt, buf lint/format, and that gen/ matches the protos
# make generate  regenerate gen/ from proto/ with the pinned buf and plugins

GO         ?= go
BUF        := $(GO) tool -modfile=tools/go.mod buf
BENCHFLAGS ?=

.PHONY: run test bench lint generate build

run:
	$(GO) run ./cmd/coordinator

build:
	$(GO) build ./...

test:
	$(GO) vet ./...
	./scripts/with-redis.sh $(GO) test -race -count=1 ./...

bench:
	./scripts/with-redis.sh $(GO) run ./bench $(BENCHFLAGS)

generate:
	$(BUF) generate

lint:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BUF) lint
	$(BUF) format --diff --exit-code
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(BUF) generate -o $$tmp && diff -r gen $$tmp/gen >/dev/null || { echo "gen/ is stale: run 'make generate' and commit it"; exit 1; }
