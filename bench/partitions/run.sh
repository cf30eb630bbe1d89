#!/usr/bin/env bash
# Throughput of one queue with 1 and with 3 partitions on a private 3-master Redis Cluster
# (docs/BENCHMARKS.md "Partitions"). Each master is pinned to a core with taskset, round robin
# over the cores there are (on 2 cores, masters 0 and 2 share core 0); the conveyor bench
# process (4 producers and a worker of concurrency 200) is left to the scheduler. Every run is
# live mode: the producers publish while the worker runs, and jobs/s is jobs completed per
# second end to end. Per run it also prints the CPU seconds each master and the bench process
# spent, which is what the arithmetic for larger clusters needs.
#
#   bash bench/partitions/run.sh [RUNS] [JOBS]        (defaults: 3 runs of 200000 jobs)
#
# It starts redis-server on free ports under a temporary directory, never touching a server
# already running, and stops them on exit.
set -euo pipefail
runs=${1:-3}
jobs=${2:-200000}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
bin=$dir/conveyor
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

(cd "$root" && go build -o "$bin" ./cmd/conveyor)
cores=$(nproc)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
addrs=()
for i in 0 1 2; do
	# The cluster bus listens on port+10000: pick ports whose bus port is free too.
	while :; do
		port=$(free_port)
		if [ "$port" -lt 55000 ] && ! (echo >"/dev/tcp/127.0.0.1/$((port + 10000))") 2>/dev/null; then break; fi
	done
	mkdir -p "$dir/n$i"
	core=$((i % cores))
	taskset -c "$core" redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/n$i" --save '' --appendonly no \
		--cluster-enabled yes --cluster-config-file nodes.conf --logfile "$dir/n$i/log" &
	pids+=($!)
	addrs+=("127.0.0.1:$port")
	echo "master $i on $port pinned to core $core"
done
for a in "${addrs[@]}"; do
	until redis-cli -h "${a%:*}" -p "${a#*:}" ping >/dev/null 2>&1; do sleep 0.1; done
done
redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
until [ "$(redis-cli -h 127.0.0.1 -p "${addrs[0]#*:}" cluster info | tr -d '\r' | grep -c '^cluster_state:ok')" = 1 ]; do sleep 0.2; done
sleep 1
url="redis://${addrs[0]}?addr=${addrs[1]}&addr=${addrs[2]}"

# cpu prints each master's used_cpu_user+used_cpu_sys in seconds.
cpu() {
	for a in "${addrs[@]}"; do
		redis-cli -h "${a%:*}" -p "${a#*:}" info cpu | tr -d '\r' |
			awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.2f ", s}'
	done
}
# net prints the bytes all masters received and sent, summed.
net() {
	for a in "${addrs[@]}"; do
		redis-cli -h "${a%:*}" -p "${a#*:}" info stats | tr -d '\r' |
			awk -F: '/^total_net_(input|output)_bytes:/ {s += $2} END {printf "%d\n", s}'
	done | awk '{s += $1} END {print s}'
}
for p in 1 3; do
	for r in $(seq "$runs"); do
		before=($(cpu))
		net0=$(net)
		out=$(/usr/bin/time -f '%U %S' -o "$dir/time" "$bin" bench --cluster --redis "$url" --jobs "$jobs" \
			--partitions "$p" --producers 4 --concurrency 200 --json --log-level warn)
		after=($(cpu))
		net1=$(net)
		read -r u s <"$dir/time"
		masters=""
		for i in 0 1 2; do masters+="$(echo "${after[$i]} - ${before[$i]}" | bc) "; done
		echo "partitions=$p run=$r master_cpu_s=[ $masters] bench_cpu_s=$(echo "$u + $s" | bc) net_bytes_per_job=$(((net1 - net0) / jobs)) $out"
	done
done
