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
# cluster) with the same client counts.
#
# Then it kills the leader with SIGKILL KILLS times in a 3-member etcd
# (restarting the killed member each time) and runs gnt's
# TestBenchFailover (10 kills): the time from the kill to the first
# successful write begun after it, as each system's own client sees it.
# etcd's writer gives up on a put after PUT_TIMEOUT (200ms) and tries
# again; with gnt's 2 s a put sent to the dying leader waited out the
# whole 2 s, which measured the timeout rather than etcd. It ends with
# each case's median over the rounds, and the kills' median and maximum.
#
# Environment: ROUNDS (3), CLIENTS (1,64,100), TARGETS (leader; or
# leader,spread), KILLS (10; 0 skips the kills), PUT_TIMEOUT (200ms).
# Needs etcd (apt-get install etcd-server).
set -euo pipefail

rounds=${ROUNDS:-3}
clients=${CLIENTS:-1,64,100}
targets=${TARGETS:-leader}
kills=${KILLS:-10}
put_timeout=${PUT_TIMEOUT:-200ms}
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
# gone P... waits until the processes have ended.
gone() {
	for p in "$@"; do
		while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
	done
}
stop_etcd() {
	if ((${#pids[@]})); then
		kill "${pids[@]}" 2>/dev/null || true
		gone "${pids[@]}"
	fi
	pids=()
}
trap 'stop_etcd; rm -rf "$dir"' EXIT

etcd_cluster="e1=http://127.0.0.31:2380,e2=http://127.0.0.32:2380,e3=http://127.0.0.33:2380"
endpoints=127.0.0.31:2379,127.0.0.32:2379,127.0.0.33:2379

# start_member I starts member I (1-3) on its data dir, new or existing,
# and sets pids[I-1] and members[I-1] (etcd's own process id: the child
# of timeout, which ends it should this script be killed).
start_member() {
	local i=$1 ip=127.0.0.3$1
	timeout 3600 etcd --name "e$i" --data-dir "$dir/e$i" \
		--listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
		--listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
		--initial-cluster "$etcd_cluster" --initial-cluster-state new --initial-cluster-token gnt-compare \
		--log-level error >>"$dir/e$i.log" 2>&1 &
	pids[i - 1]=$!
	disown "$!" # no "Killed" notice from bash when the failover kills it
	local child=""
	for _ in $(seq 50); do
		child=$(pgrep -P "${pids[i - 1]}" -x etcd || true)
		[ -n "$child" ] && break
		sleep 0.1
	done
	members[i - 1]=$child
}

start_etcd() {
	rm -rf "$dir"/e?
	pids=() members=()
	for i in 1 2 3; do start_member "$i"; done
}

member_list() { (IFS=,; echo "${members[*]}"); }

echo "bench-etcd: $(etcd --version | head -1), gnt at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'); $rounds rounds, clients $clients, targets $targets"
for ((r = 1; r <= rounds; r++)); do
	echo "== round $r/$rounds $(date +%T)"
	start_etcd
	"$root/bin/etcd-load" -endpoints "$endpoints" -clients "$clients" -targets "$targets" -pids "$(member_list)" | tee -a "$out"
	stop_etcd
	(cd "$root/integration" && GNT_BENCH=1 GNT_BIN_DIR="$root/bin" GNT_BENCH_GEN=rpc GNT_BENCH_TARGETS="$targets" \
		GNT_BENCH_CLIENTS="$clients" "$root/bin/integration.test" -test.count=1 -test.v -test.timeout 10m \
		-test.run 'TestBenchJobThroughput$' | grep '^BENCH' | tee -a "$out")
done

if ((kills > 0)); then
	echo "== kill -9 of the leader, $kills times each $(date +%T)"
	start_etcd
	for ((k = 1; k <= kills; k++)); do
		line=$("$root/bin/etcd-load" -failover -put-timeout "$put_timeout" -endpoints "$endpoints" -pids "$(member_list)")
		echo "$line" | tee -a "$out"
		victim=$(echo "$line" | sed -n 's/.* killed=\([123]\) .*/\1/p')
		gone "${pids[victim - 1]}"
		start_member "$victim"
	done
	stop_etcd
	(cd "$root/integration" && GNT_BENCH=1 GNT_BIN_DIR="$root/bin" "$root/bin/integration.test" -test.count=1 -test.v \
		-test.timeout 10m -test.run 'TestBenchFailover$' | grep '^BENCH' | tee -a "$out")
fi

echo "== medians over $rounds rounds"
"$root/bin/etcd-load" -summarize "$out"
