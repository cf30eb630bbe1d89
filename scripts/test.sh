#!/usr/bin/env bash
# The test command (README: "bash scripts/test.sh"). It needs Go; tests start private
# redis-server processes on free ports and never touch a server already running on 6379.
#
#   0. the Debian packages the tests need, installed when missing (as root or through a
#      password-less sudo; apt-get update once): redis-server, redis-tools, chromium for the
#      dashboard's browser test and postgresql for the outbox's (private servers, internal/pgtest)
#      (scripts/packages.sh; CONVEYOR_NO_INSTALL=1 installs nothing)
#   1. formatting, vet and staticcheck, for each module of the workspace (go.work): the library,
#      cmd/conveyor (the binary), e2e and bench
#   2. the test suites of the library and of cmd/conveyor, race-enabled but for the end-to-end
#      tests of the built binary (below): unit, integration (real Redis, standalone and a 3-node
#      cluster), end-to-end (the built binary; workers SIGKILLed, SIGSTOPped and SIGTERMed) and
#      runnable examples; then the e2e module's (its own go.mod, so that the library does not
#      require chromedp or compose-go): the dashboard in headless Chromium and the
#      docker-compose.yml test
#   3. a short side-by-side benchmark against asynq, watermill-redisstream and raw go-redis,
#      so the harness cannot rot (the full run: docs/BENCHMARKS.md)
#
# Time budget (docs/DEVELOPMENT.md, "Time budget"): every step prints its time, and at the end
# (also when a step failed) a table of all steps. The tests run with `go test -json`: a line a
# package as it ends, then internal/cmd/testreport prints the output of the tests that failed
# (plain text, as `go test` prints it), a table of every package's seconds and result and the
# 15 slowest tests. The JSON stays in $CONVEYOR_TEST_OUT (default .ci-out/) to print the report
# again: `go run ./internal/cmd/testreport .ci-out/*.json`.
#
# Race detection where it can find races: the library's packages, cmd/conveyor's packages but
# main, and the in-process tests of cmd/conveyor run with -race; cmd/conveyor's end-to-end tests drive a binary built without the
# race detector (buildCLI), so they run without it, in the background beside the race suite.
# A check then asserts that every test `go test -list` names in cmd/conveyor ran in one of them.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${CONVEYOR_TEST_OUT:-.ci-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
(cd "$out" && rm -f race.json conveyor-binary.json conveyor-inprocess.json e2e.json bench.json conveyor-list.txt)
T0=$(date +%s)
step_name=""
step_start=$T0
steps=()
end_step() {
  if [ -n "$step_name" ]; then
    local took=$(($(date +%s) - step_start))
    printf '== %s: %ds (total %ds)\n' "$step_name" "$took" "$(($(date +%s) - T0))"
    steps+=("$(printf '%-55s %6d' "$step_name" "$took")")
  fi
}
step() {
  end_step
  step_name="$*"
  step_start=$(date +%s)
  printf '\n== %s\n' "$*"
}
step_table() {
  local rc=$?
  end_step
  step_name=""
  printf '\n%-55s %6s\n' "step" "seconds"
  printf '%s\n' "${steps[@]}"
  printf '%-55s %6d\n' "total" "$(($(date +%s) - T0))"
  [ "$rc" = 0 ] || printf 'FAILED (exit %d) in the last step above\n' "$rc"
}
trap step_table EXIT

# json NAME DIR ARGS...: `go test -json ARGS...` in DIR, its output kept in $out/NAME.json, a line
# printed a package as it ends; returns go test's exit code.
json() {
  local name=$1 dir=$2
  shift 2
  local rc
  set +e
  (cd "$dir" && go test -json "$@" 2>&1) | tee "$out/$name.json" | "$out/testreport" -live
  rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

step "packages"
# shellcheck source=scripts/packages.sh
. scripts/packages.sh
need_test_packages
if ! install_needed; then
  echo "as root: apt-get update && apt-get install -y redis-server redis-tools chromium postgresql" \
    "(CONVEYOR_CHROMIUM names another Chromium; CONVEYOR_BROWSER_TEST=skip skips the browser test)"
  exit 1
fi

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './vendor/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "release headings (scripts/tags.sh --check)"
bash scripts/tags.sh --check

step "go vet"
go vet ./...
(cd cmd/conveyor && go vet ./...)
(cd e2e && go vet ./...)
(cd bench && go vet ./...)

step "staticcheck"
# Pinned, run through the module proxy: nothing to install by hand. All checks on; none disabled.
staticcheck="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
go run "$staticcheck" ./...
(cd cmd/conveyor && go run "$staticcheck" ./...)
(cd e2e && go run "$staticcheck" ./...)
(cd bench && go run "$staticcheck" ./...)

step "tests: go test -race (library, cmd/conveyor's packages), cmd/conveyor's binary tests without -race"
go build -o "$out/testreport" ./internal/cmd/testreport
# cmd/conveyor is a module of its own; the workspace (go.work) lets one go test from here name
# the packages of both modules, cmd/conveyor's built against the library in this tree.
conveyor=$(go list ./cmd/conveyor)
# cmd/conveyor's tests that run the command inside the test binary, not the built binary: the
# race detector can only see races there. A test added to cmd/conveyor runs without -race unless
# it is named here; the -list check below fails if one runs in neither invocation.
inprocess='^(TestDemoInProcess|TestBackoffSteps)$'
mapfile -t library < <(go list ./... ./cmd/conveyor/... | grep -vxF "$conveyor")
go test -list '.*' ./cmd/conveyor >"$out/conveyor-list.txt"
tests=0
json conveyor-binary . -count=1 -timeout 20m -skip "$inprocess" ./cmd/conveyor &
binary=$!
json race . -race -count=1 -timeout 20m "${library[@]}" || tests=$?
json conveyor-inprocess . -race -count=1 -timeout 20m -run "$inprocess" ./cmd/conveyor || tests=$?
wait "$binary" || tests=$?
"$out/testreport" -expect "$out/conveyor-list.txt" -pkg "$conveyor" \
  "$out/conveyor-binary.json" "$out/conveyor-inprocess.json" || tests=1
"$out/testreport" "$out/race.json" "$out/conveyor-binary.json" "$out/conveyor-inprocess.json"
[ "$tests" = 0 ] || exit "$tests"

step "e2e module tests"
json e2e e2e -race -count=1 -timeout 10m ./... || tests=$?
"$out/testreport" "$out/e2e.json"
[ "$tests" = 0 ] || exit "$tests"

step "bench module tests"
json bench bench -short -count=1 -timeout 10m ./... || tests=$?
"$out/testreport" "$out/bench.json"
[ "$tests" = 0 ] || exit "$tests"

step "short peer comparison (bench/cmd/compare -jobs 5000 -rounds 1)"
(cd bench && go run ./cmd/compare -jobs 5000 -rounds 1)

step "all tests passed"
step_name=""
