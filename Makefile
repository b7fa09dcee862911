# gnt — see README.md. `make demo` runs a whole cluster here; `make test` runs the tests.
GO      ?= go
BIN     := $(CURDIR)/bin
PKGS    := ./...
UNIT    := ./fsm/... ./confd/... ./rpc/... ./jobs/... ./transport/... ./server/... ./cmd/...
STATICCHECK_VERSION ?= v0.8.2

export GNT_BIN_DIR := $(BIN)

.PHONY: all build demo test unit integration chaos bench lint fmt clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gntd ./cmd/gntd
	$(GO) build -o $(BIN)/gnt ./cmd/gnt

# A whole cluster in the foreground: 3 candidates (127.0.0.11-13), 3 nodes
# (127.0.0.21-23), each a separate gntd. Ctrl-C stops it.
demo: build
	$(BIN)/gntd dev $(DEMO_FLAGS)

# vet, unit tests with -race, then the integration tests against real
# gntd processes. The last lines are go test's own summary.
test: build
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 $(UNIT)
	$(GO) test -count=1 -timeout 20m ./integration/...

unit:
	$(GO) test -race -count=1 $(UNIT)

integration: build
	$(GO) test -count=1 -v -timeout 20m ./integration/...

# Figures, not assertions: FSM apply rate, end-to-end jobs/s with 1 and 64
# clients through a 3-candidate cluster, and kill -9 of the leader to the
# next successful job (median and max over 10 kills); confd queries/s on
# loopback beside a raw UDP echo server; gossip: a stopped member to dead with
# 6-100 in-process members (stock settings beside, and under CPU load), and
# kill -9 of a node to dead in the state of a real 6-node cluster.
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./fsm/
	$(GO) test -run '^$$' -bench . -benchtime 2s ./jobs/locking/
	GNT_BENCH=1 $(GO) test -count=1 -v -run 'TestBenchUDP' -bench 'BenchmarkHandle' -benchtime 1s ./confd/
	GNT_BENCH=1 $(GO) test -count=1 -v -timeout 30m -run 'TestBenchGossip' ./transport/
	GNT_BENCH=1 $(GO) test -count=1 -v -timeout 30m -run 'TestBench' ./integration/

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
