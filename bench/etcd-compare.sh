#!/usr/bin/env bash
# etcd-compare: gnt's configuration jobs beside puts to a 3-member etcd, on
# the same machine, in alternating rounds (`make bench-etcd`).
#
# The issue's targets were set against an etcd measured on this machine on
# a faster day; the machine's speed varies by a factor of two from day to
# day, so the fair comparison is the two systems run one after the other.
# Each round starts a fresh 3-member etcd (127.0.0.31-33, data in a temp
# dir, fsync on as etcd always does), drives it with bench/etcdcompare,
# stops it, then runs gnt's TestBenchJobThroughput (a fresh 3-candidate
# cluster) with the same client counts. It ends with the median over the
# rounds of each case.
#
# Environment: ROUNDS (3), CLIENTS (1,64,100), TARGETS (leader; or
# leader,spread). Needs etcd (apt-get install etcd-server).
set -euo pipefail

rounds=${ROUNDS:-3}
clients=${CLIENTS:-1,64,100}
targets=${TARGETS:-leader}
go=${GO:-go}

if ! command -v etcd >/dev/null; then
	echo "bench-etcd: no etcd binary in PATH; install it first (apt-get install etcd-server)" >&2
	exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root/bench/etcdcompare" && $go build -o "$root/bin/etcd-load" .)
(cd "$root/integration" && $go test -c -o "$root/bin/integration.test" .)

dir=$(mktemp -d /tmp/gnt-etcd-compare.XXXXXX)
out=$dir/results
pids=()
stop_etcd() {
	if ((${#pids[@]})); then
		kill "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	pids=()
}
trap 'stop_etcd; rm -rf "$dir"' EXIT

start_etcd() {
	local cluster="e1=http://127.0.0.31:2380,e2=http://127.0.0.32:2380,e3=http://127.0.0.33:2380"
	rm -rf "$dir"/e?
	for i in 1 2 3; do
		local ip=127.0.0.3$i
		timeout 3600 etcd --name "e$i" --data-dir "$dir/e$i" \
			--listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
			--listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
			--initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token gnt-compare \
			--log-level error >"$dir/e$i.log" 2>&1 &
		pids+=($!)
	done
	# The etcd processes themselves (children of timeout), for their CPU.
	members=""
	for p in "${pids[@]}"; do
		local child=""
		for _ in $(seq 50); do
			child=$(pgrep -P "$p" -x etcd || true)
			[ -n "$child" ] && break
			sleep 0.1
		done
		members+="${members:+,}$child"
	done
}

echo "bench-etcd: $(etcd --version | head -1), gnt at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'); $rounds rounds, clients $clients, targets $targets"
for ((r = 1; r <= rounds; r++)); do
	echo "== round $r/$rounds $(date +%T)"
	start_etcd
	"$root/bin/etcd-load" -clients "$clients" -targets "$targets" -pids "$members" | tee -a "$out"
	stop_etcd
	(cd "$root/integration" && GNT_BENCH=1 GNT_BIN_DIR="$root/bin" GNT_BENCH_GEN=rpc GNT_BENCH_TARGETS="$targets" \
		GNT_BENCH_CLIENTS="$clients" "$root/bin/integration.test" -test.count=1 -test.v -test.timeout 10m \
		-test.run 'TestBenchJobThroughput$' | grep '^BENCH' | tee -a "$out")
done

echo "== medians over $rounds rounds"
"$root/bin/etcd-load" -summarize "$out"
