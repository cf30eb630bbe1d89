#!/usr/bin/env bash
# metrics-cost.sh [ROUNDS] [JOBS]: the cost of a worker's metrics (docs/BENCHMARKS.md, "Metrics
# cost"). Each round drains JOBS no-op jobs with a bare worker, and with every metric wired in
# (metrics.BenchmarkWorker). Each runs in a fresh process, and so on a fresh private
# redis-server. They alternate which goes first, so neither always meets the warmer machine. It
# prints both runs' jobs/s and CPU per job and their ratios (metrics / bare), then the medians.
set -euo pipefail
rounds=${1:-16}
jobs=${2:-50000}
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/metrics.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./metrics/
cd metrics
field() { awk -v unit="$1" '{for (i = 1; i <= NF; i++) if ($i == unit) print $(i-1)}'; }
tratios=() cratios=()
for i in $(seq "$rounds"); do
	order="bare metrics"
	if ((i % 2 == 0)); then order="metrics bare"; fi
	declare -A tput cpu
	for v in $order; do
		line=$("$bin" -test.run=NONE -test.bench="BenchmarkWorker/$v\$" -test.benchtime="${jobs}x" 2>/dev/null | grep jobs/s)
		tput[$v]=$(field jobs/s <<<"$line")
		cpu[$v]=$(field cpu-us/job <<<"$line")
	done
	t=$(echo "scale=3; ${tput[metrics]} / ${tput[bare]}" | bc)
	c=$(echo "scale=3; ${cpu[metrics]} / ${cpu[bare]}" | bc)
	tratios+=("$t") cratios+=("$c")
	echo "round $i ($order): jobs/s bare ${tput[bare]} metrics ${tput[metrics]} ratio $t | cpu-us/job bare ${cpu[bare]} metrics ${cpu[metrics]} ratio $c"
done
median() { sort -n | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "median ratio (metrics / bare): jobs/s $(printf '%s\n' "${tratios[@]}" | median), cpu per job $(printf '%s\n' "${cratios[@]}" | median)"
