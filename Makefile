# GPU Orchestrator. `make run` starts a working orchestrator; `make test` runs every test.
GO        ?= go
BIN       := bin
PKGS      := ./...
# go-nvml's headers use deprecated declarations; keep cgo builds quiet.
export CGO_CFLAGS ?= -Wno-deprecated-declarations

.PHONY: all build run test test-short fuzz bench bench-compare lint fmt services clean runbook-check image image-name

all: build

## build: the three binaries into bin/
build:
	@echo "building $(BIN)/ (the first build takes a few minutes; later ones seconds)…"
	$(GO) build -o $(BIN)/ ./cmd/orchestrator ./cmd/worker ./cmd/orchctl

## run: build, then the orchestrator in embedded dev mode: SQLite in ./data (ORCH_DATA_DIR), an
## in-process Redis, a local worker pool, simulated GPUs. Needs nothing but Go: no MariaDB, no Redis.
run: build
	./$(BIN)/orchestrator dev

## test: go vet, then every test with the race detector against the real MariaDB and Redis
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(MAKE) fuzz FUZZTIME=10000x

## fuzz: the request-decoder fuzz targets, each for FUZZTIME (no 5xx, no panic), and one that
## goes through the engine into the embedded mode's SQLite store (what the decoder accepts is
## stored, and reads back as valid JSON; about 3 s for 10000x on 2 cores). A count
## (10000x) rather than a duration in `make test`: with a duration, Go 1.26's fuzz coordinator
## can report "context deadline exceeded" at the end on a loaded machine with no failing
## input (go.dev/issue/75804, fixed in Go 1.27).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzSubmit$$' -fuzztime $(FUZZTIME) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzLeaseRequest$$' -fuzztime $(FUZZTIME) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzSubmitStore$$' -fuzztime $(FUZZTIME) ./api
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) ./internal/strictjson

## test-short: the fast tests only (no process-level end-to-end runs)
test-short:
	$(GO) test -short -count=1 $(PKGS)

## bench: the load generator against a stack it starts (see cmd/bench/README.md); extra flags in
## BENCH_FLAGS; the report goes to stdout and to a file outside the tree (printed at the end)
bench: build services
	$(GO) run ./cmd/bench $(BENCH_FLAGS)

## bench-compare: the bench and its peers (River, asynq, and asynq on a Redis with appendfsync
## always) back to back on one load; prints the table with the orchestrator's ratios and writes
## the reports outside the tree (cmd/bench/README.md, "Side by side"); flags in COMPARE_FLAGS
bench-compare: build services
	$(GO) run ./cmd/bench/compare $(COMPARE_FLAGS)

## lint: gofmt, go vet, then golangci-lint (the checks and their reasons: .golangci.yml). The
## linter is pinned in its own module, tools/golangci/go.mod, so that its dependencies do not
## raise the versions the binaries are built with; the first run builds it (about 3 min cold on
## 2 cores, with go vet).
## golangci-lint's dupl compares the files of one package with each other; the same dupl, run
## over every non-test file at once, finds the copies between packages too (the two store
## drivers, say). DUPL_TOKENS is its threshold, the one .golangci.yml sets: about five lines.
## The peers module (cmd/bench/peers) is a module of its own and may not import ours.
GOLANGCI := $(GO) tool -modfile=tools/golangci/go.mod golangci-lint
DUPL := $(GO) tool -modfile=tools/golangci/go.mod dupl
DUPL_TOKENS := 60
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@echo "golangci-lint (the first run builds it: a few minutes from a cold cache)…"
	$(GOLANGCI) run $(PKGS)
	@echo "dupl across packages (copies of $(DUPL_TOKENS) tokens or more, test files aside)…"
	@out=$$(git ls-files '*.go' | grep -v '_test\.go$$' | grep -v '^cmd/bench/peers/' | $(DUPL) -files -t $(DUPL_TOKENS)); \
		case "$$out" in *"Found total 0 clone groups."*) ;; *) echo "$$out"; exit 1 ;; esac

fmt:
	gofmt -w $$(git ls-files '*.go')

## image: the container image of the three binaries, without a Docker engine and without pulling
## anything: built here, put into an image from scratch with buildah (vfs storage) with the C
## library files they load and a non-root user; prints its name, id and size
## (scripts/image.sh). Needs buildah (`make services` installs it) and root. The Dockerfile
## builds the same files for a Docker engine. VERSION is the release: the tag, the version label
## and `orchestrator version`; deploy/k8s/overlays/release names $(IMAGE):$(VERSION), which
## `go test ./deploy/` checks against `make image-name`.
IMAGE   ?= ghcr.io/gpuorch/orchestrator
VERSION ?= 0.1.0
image:
	IMAGE_REF=$(IMAGE):$(VERSION) VERSION=$(VERSION) bash scripts/image.sh

## image-name: the name and tag `make image` commits
image-name:
	@echo $(IMAGE):$(VERSION)

## services: install (when missing) and start MariaDB and Redis on this machine, and install buildah
## (make image, the image test); idempotent
services:
	@bash scripts/services.sh

clean:
	rm -rf $(BIN)

## runbook-check: run the procedures of docs/runbook.md with the real binaries against a real stack
## (a private Redis, two orchestrators on a fresh MariaDB database, local pools); about a minute.
## Not part of `make test`.
.PHONY: runbook-check
runbook-check: services
	bash scripts/runbook-check.sh
