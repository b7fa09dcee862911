# gnt — see README.md. `make demo` runs a whole cluster here; `make test` runs the tests.
GO      ?= go
BIN     := $(CURDIR)/bin
PKGS    := ./...
UNIT    := ./fsm/... ./qlang/... ./pki/... ./netlimit/... ./oob/... ./confd/... ./rpc/... ./agent/... ./jobs/... ./repair/... ./transport/... ./server/... ./cmd/...
STATICCHECK_VERSION ?= v0.8.2

export GNT_BIN_DIR := $(BIN)

DURATION ?= 20m
# Executions, not seconds: go1.26's fuzz coordinator can fail a target with a
# bare "context deadline exceeded" when a -fuzztime duration runs out while a
# worker is mid-input (golang/go#75804, fixed in go1.27); a count has no deadline.
FUZZTIME ?= 50000x
CHAOS_TIMEOUT ?= 24h
# The commit `gnt --version` and `gntd --version` show; Go stamps nothing in
# a git worktree or with -buildvcs=false.
COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
BUILD_DATE := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_LDFLAGS := -ldflags "-X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)"

# make install (PREFIX, DESTDIR as usual; docs/install.md).
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
COMPDIR    ?= $(PREFIX)/share/bash-completion/completions
DOCDIR     ?= $(PREFIX)/share/doc/gnt

.PHONY: all build guest demo test unit integration chaos fuzz bench bench-etcd lint fmt clean install

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build $(VERSION_LDFLAGS) -o $(BIN)/gntd ./cmd/gntd
	$(GO) build $(VERSION_LDFLAGS) -o $(BIN)/gnt ./cmd/gnt
	$(GO) build $(VERSION_LDFLAGS) -o $(BIN)/gnt-oob-fake ./cmd/gnt-oob-fake
	$(GO) build $(VERSION_LDFLAGS) -o $(BIN)/gnt-oob-ipmi ./cmd/gnt-oob-ipmi

# gntd, gnt and gnt-oob-fake in BINDIR; the IPMI OOB helper in the
# helpers' whitelist directory, where gntd accepts it; the whitelist
# directories of hooks and commands; the systemd unit; the example config
# (kept when one is there); bash completion; the docs.
install: build
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(COMPDIR) $(DESTDIR)$(DOCDIR)
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/gnt $(DESTDIR)$(SYSCONFDIR)/gnt/oob-programs $(DESTDIR)$(SYSCONFDIR)/gnt/hypervisor \
		$(DESTDIR)$(SYSCONFDIR)/gnt/node-diagnose-commands $(DESTDIR)$(SYSCONFDIR)/gnt/node-repair-commands
	install -m 0755 $(BIN)/gntd $(BIN)/gnt $(BIN)/gnt-oob-fake $(DESTDIR)$(BINDIR)/
	install -m 0755 $(BIN)/gnt-oob-ipmi $(DESTDIR)$(SYSCONFDIR)/gnt/oob-programs/
	test -e $(DESTDIR)$(SYSCONFDIR)/gnt/gntd.json || install -m 0644 dist/gntd.json $(DESTDIR)$(SYSCONFDIR)/gnt/gntd.json
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' dist/gntd.service.in > $(DESTDIR)$(UNITDIR)/gntd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/gntd.service
	install -m 0644 dist/bash-completion $(DESTDIR)$(COMPDIR)/gnt
	install -m 0644 dist/bash-completion $(DESTDIR)$(COMPDIR)/gntd
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/

# The kvm driver's test guest: bin/guest/initramfs.cpio.gz, from Debian's
# busybox-static (its /init prints "GNT-GUEST-UP <n>" on the serial console
# every 100 ms and powers off on ACPI powerdown); boot it with
# kernel_path=/boot/vmlinuz-* initrd_path=$(BIN)/guest/initramfs.cpio.gz.
guest:
	agent/testdata/mkguest.sh $(BIN)/guest

# A whole cluster in the foreground: 3 candidates (127.0.0.11-13), 3 nodes
# (127.0.0.21-23), each a separate gntd. Ctrl-C stops it.
demo: build
	$(BIN)/gntd dev $(DEMO_FLAGS)

# vet, unit tests with -race, the integration tests against real gntd
# processes, then the CI-sized chaos run (every fault kind once on a
# 5-candidate cluster under load; about a minute), which prints its seed
# and one summary line. The chaos run goes last and alone: it wants the
# two cores to itself.
test: build
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(UNIT)
	cd bench/etcdcompare && $(GO) vet . && $(GO) test -count=1 .
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./integration/... | grep -v /integration/chaos)
	cd integration/chaos && $(GO) test -count=1 -timeout 20m

unit:
	$(GO) test -race -count=1 -timeout 20m $(UNIT)

integration: build
	$(GO) test -count=1 -v -timeout 20m ./integration/...

# The chaos suite for as long as asked (make chaos DURATION=2h): fresh
# clusters of 5 or 3 candidates one after the other, each under load and
# random faults for a minute (GNT_CHAOS_RUN_LENGTH), until DURATION has
# passed. One line per run and a summary; GNT_CHAOS_SEED=N replays a seed;
# a failing run keeps its files under integration/artifacts/.
chaos: build
	cd integration/chaos && GNT_CHAOS_DURATION=$(DURATION) $(GO) test -count=1 -timeout $(CHAOS_TIMEOUT) -run 'TestChaos$$'

# Every Fuzz* target of the project for FUZZTIME executions each (go test -fuzz takes
# one target of one package at a time). A failure leaves its input under
# the package's testdata/fuzz/FuzzX/: commit it, and it runs as a
# regression test with the unit tests from then on.
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(cd $$dir && $(GO) test -list '^Fuzz' . | grep '^Fuzz'); do \
	    echo "fuzz: $$dir $$f for $(FUZZTIME)"; \
	    (cd $$dir && $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) .); \
	  done; \
	done

# Figures, not assertions: FSM apply rate, end-to-end jobs/s with 1 and 64
# clients through a 3-candidate cluster, and kill -9 of the leader to the
# next successful job (median and max over 10 kills); confd queries/s on
# loopback beside a raw UDP echo server; gossip: a stopped member to dead with
# 6-100 in-process members (stock settings beside, and under CPU load), and
# kill -9 of a node to dead in the state of a real 6-node cluster; the CPU
# an idle 6-member cluster uses, per member; 1,000 nodes and 20,000
# instances built through the API (TestBenchScale): each candidate's RSS,
# the snapshot size, a follower's restart and snapshot catch-up times.
# GNT_BENCH_PROFILE=DIR (and GNT_BENCH_TRACE=1) keeps the gntds' and the load
# generator's CPU profiles, Raft timings (and execution traces) of the job
# benchmarks; GNT_BENCH_TARGETS=leader GNT_BENCH_CLIENTS=64 GNT_BENCH_GEN=lean
# narrows the configuration-job benchmark to one case. The job benchmarks
# run each case with two load generators: gen=rpc (rpc.Client, net/http)
# and gen=lean (hand-written HTTP/1.1, integration/leanclient_test.go),
# which sends the same requests for less of the CPU the gntds share.
# With QEMU installed, TestBenchKVM puts gnt's guest start/stop, live
# migration and harep failover beside bare QEMU driven over QMP in the same
# run (it prints a SKIP line without QEMU).
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s ./fsm/
	$(GO) test -run '^$$' -bench . -benchtime 2s ./jobs/locking/
	$(GO) test -run '^$$' -bench . -benchtime 2s ./jobs/alloc/
	$(GO) test -run '^$$' -bench . -benchtime 2s ./repair/
	$(GO) test -run '^$$' -bench StoreLogs -benchtime 2000x ./server/
	$(GO) test -run '^$$' -bench BulkInstances -benchmem -benchtime 5x ./rpc/
	GNT_BENCH=1 $(GO) test -count=1 -v -run 'TestBenchUDP' -bench 'BenchmarkHandle' -benchtime 1s ./confd/
	GNT_BENCH=1 $(GO) test -count=1 -v -timeout 30m -run 'TestBenchGossip' ./transport/
	GNT_BENCH=1 $(GO) test -count=1 -v -timeout 60m -run 'TestBench' ./integration/

# gnt beside etcd on this machine, in alternating rounds (bench/etcd-compare.sh):
# the issue's targets were set against a 3-member etcd measured here on a faster
# day. Writes/s and p50 with 1, 64 and 100 clients, then kill -9 of the leader
# to the next write. Needs etcd (apt-get install etcd-server); ROUNDS, CLIENTS,
# TARGETS, KILLS narrow it.
bench-etcd: build
	GO=$(GO) bench/etcd-compare.sh

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)
	cd bench/etcdcompare && $(GO) vet . && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) .

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
