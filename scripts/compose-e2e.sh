#!/usr/bin/env bash
# End-to-end run of docker-compose.yml with real containers. It runs the project's Dockerfile,
# Redis, three workers, the producer and the API, all on the host's network and loopback only
# (docker-compose.e2e.yml). Then it SIGKILLs a worker whose jobs the others must recover. It runs
# README.md's "With Docker" commands, with the override file on top: `docker compose up --build`
# (with -d --wait) and `docker kill <a worker>`.
#
#   bash scripts/compose-e2e.sh
#
# Phases (each one timed; the table is printed at the end, also on failure):
#   engine     a Docker engine: Debian's docker.io is installed when dockerd is missing, and a
#              dockerd is started when none answers (with --bridge=none --iptables=false
#              --ip-forward=false: only host networking is used; stopped again at the end)
#   compose    Docker Compose v2 (>= 2.24, for the !reset tag) unless a `docker compose` is
#              there already: Debian's docker-compose package when the machine's release has
#              v2 (Debian 13 on), else the plugin out of Debian 13's package, fetched with
#              apt-get download into a private apt directory (about 20 s) and installed as the
#              CLI plugin ~/.docker/cli-plugins/docker-compose; if that fails, Compose built
#              through the Go module proxy (3 to 12 minutes, by the machine's load; cached)
#   standins   local stand-ins for the base images when no registry is reachable, made from
#              this machine's own binaries and libraries with `docker import` (seconds;
#              scripts/docker-standins.sh; cached, skipped for images pulled for real)
#   up         `docker compose up --build -d --wait` with a random project name: builds the
#              image from the real Dockerfile (tagged conveyor:e2e-<random>, labels checked),
#              Redis on a free loopback port, the API on another; checks: Redis healthy,
#              3 workers running and started; the idle RSS of one more worker of the image
#   jobs       echo jobs published through `docker compose run --rm cli publish`, noop jobs
#              from the host with the image's own binary, a flaky job that completes on its
#              retry and a failing one that lands in the dead set; all must end as expected
#   api        healthy by its `serve --probe` health check, /healthz, /readyz, POST a job: 401
#              without the token, 202 with .env's; the job completes (long poll), dashboard,
#              /metrics (401 without the token, conveyor_ series with it)
#   producer   the producer's jobs appear and complete
#   recovery   12 sleep jobs of 20s; the worker holding most of them is SIGKILLed
#              (`docker kill` by container id); every job must complete, those it held when it
#              died (their lost attempt names it) on another worker with attempt 2 (also through
#              the API), any other it finished before the kill; the queue's recovered counter
#              must count them
#   down       `docker compose down -v`; nothing of the project may remain
# At exit, whatever happened, the cleanup removes the project's containers, volumes and
# networks (by id) and the image built here. It stops the dockerd if this script started it.
# The stand-in images, the compose plugin and Docker's build cache stay for the next run.
#
# Environment:
#   E2E_BUILDER   auto (default: compose's own choice, BuildKit), buildkit or classic
#                 (DOCKER_BUILDKIT=1 or 0 for compose)
#   E2E_KEEP=1    leave the stack running at the end (for a look; remove it by hand)
#   E2E_REF=REV   test a committed revision (git archive REV: Dockerfile, compose files, code)
#                 instead of the working tree, e.g. while the tree is mid-edit
#   GOPROXY       the module proxy for the image build (default: `go env GOPROXY`)
#   E2E_COMPOSE_FROM  where a missing Compose comes from: debian (default; source if that
#                 fails) or source
#   DEBIAN_MIRROR the mirror for Debian 13's docker-compose (default: the machine's apt source)
#
# Needs root or sudo (apt-get, dockerd), Go 1.26 on PATH or at /usr/local/go,
# curl and jq (installed from Debian's packages when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

COMPOSE_DEBIAN_SUITE=trixie # Debian 13, the first release with Compose v2 as docker-compose (2.26.1)
COMPOSE_VERSION=v2.29.7     # built from source when Debian's package cannot be had
COMPOSE_MIN=2.24.0 # the YAML tags !reset and !override
SLEEP_MS=20000     # length of the jobs in the recovery phase: far more than choosing and killing the victim takes
VISIBILITY=30      # the workers' --visibility-timeout (default), in seconds
RECOVERY_INTERVAL=5

rand_hex() { od -An -N4 -tx1 /dev/urandom | tr -d ' \n'; }
RUN_ID=$(rand_hex)
PROJECT=conveyor-e2e-$RUN_ID
IMAGE=conveyor:e2e-$RUN_ID
TMP=$(mktemp -d)
DOCKERD_PID=
DOCKERD_LOG=
PROJECT_UP=0
IMAGE_BUILT=0
IDLE_CID=
SRC=. # the tree under test: the working tree, or E2E_REF's export
REDIS_PORT=
API_PORT=
STATUS=1

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
now() { date +%s.%N; }
# calc EXPR: floating-point arithmetic, one decimal.
calc() { awk "BEGIN { printf \"%.1f\", $1 }"; }

# Phase timing.
PHASES=()
PHASE_NAME=
PHASE_START=
phase() {
  phase_end
  PHASE_NAME=$1
  PHASE_START=$(now)
  printf '\n== %s\n' "$1" >&2
}
phase_end() {
  if [ -n "$PHASE_NAME" ]; then
    PHASES+=("$(printf '%-10s %7.1fs' "$PHASE_NAME" "$(calc "$(now) - $PHASE_START")")")
    PHASE_NAME=
  fi
}
T0=$(now)

compose() {
  E2E_IMAGE=$IMAGE E2E_REDIS_PORT=$REDIS_PORT E2E_API_PORT=$API_PORT \
    docker compose -f "$SRC/docker-compose.yml" -f "$SRC/docker-compose.e2e.yml" -p "$PROJECT" "$@"
}

cleanup() {
  local rc=$? ids
  trap - EXIT INT TERM
  [ "$rc" -eq 0 ] && [ "$STATUS" -ne 0 ] && rc=$STATUS
  phase_end
  if [ "${E2E_KEEP:-0}" = 1 ] && [ "$PROJECT_UP" = 1 ]; then
    log "E2E_KEEP=1: project $PROJECT and image $IMAGE left running"
  else
    printf '\n== cleanup\n' >&2
    local c0; c0=$(now)
    if [ "$PROJECT_UP" = 1 ]; then
      compose down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || log "compose down failed"
    fi
    if docker info >/dev/null 2>&1; then
      [ -z "$IDLE_CID" ] || docker rm -f "$IDLE_CID" >/dev/null 2>&1 || true
      ids=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")
      [ -z "$ids" ] || { log "removing containers $ids"; docker rm -f $ids >/dev/null || true; }
      ids=$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
      [ -z "$ids" ] || { log "removing volumes $ids"; docker volume rm $ids >/dev/null || true; }
      ids=$(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")
      [ -z "$ids" ] || { log "removing networks $ids"; docker network rm $ids >/dev/null || true; }
      if [ "$IMAGE_BUILT" = 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
        docker rmi "$IMAGE" >/dev/null || log "could not remove $IMAGE"
      fi
    fi
    PHASES+=("$(printf '%-10s %7.1fs' cleanup "$(calc "$(now) - $c0")")")
  fi
  if [ -n "$DOCKERD_PID" ] && [ "${E2E_KEEP:-0}" = 1 ] && [ "$PROJECT_UP" = 1 ]; then
    log "E2E_KEEP=1: the dockerd this script started keeps running (pid $DOCKERD_PID, log $DOCKERD_LOG)"
  elif [ -n "$DOCKERD_PID" ]; then
    if [ "$rc" -ne 0 ] && [ -n "$DOCKERD_LOG" ] && grep -qE 'level=(error|fatal)' "$DOCKERD_LOG"; then
      log "dockerd's errors (last 20):"; grep -E 'level=(error|fatal)' "$DOCKERD_LOG" | tail -n 20 >&2 || true
    fi
    log "stopping the dockerd this script started (pid $DOCKERD_PID)"
    sudo_ kill -TERM "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 60); do sudo_ kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    if sudo_ kill -0 "$DOCKERD_PID" 2>/dev/null; then
      log "dockerd did not stop in 30s; SIGKILL"; sudo_ kill -KILL "$DOCKERD_PID" || true
    fi
    sudo_ rm -f "$DOCKERD_LOG"
  fi
  rm -rf "$TMP"
  printf '\n== timings\n' >&2
  for p in "${PHASES[@]}"; do printf '  %s\n' "$p" >&2; done
  printf '  %-10s %7.1fs\n' total "$(calc "$(now) - $T0")" >&2
  if [ "$rc" -eq 0 ]; then printf '\ncompose e2e: PASS\n' >&2; else printf '\ncompose e2e: FAIL (exit %s)\n' "$rc" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${E2E_REF:-}" ]; then
  SRC=$TMP/src
  mkdir -p "$SRC"
  git archive "$E2E_REF" | tar -x -C "$SRC" || fail "git archive $E2E_REF"
  log "testing $E2E_REF ($(git rev-parse --short "$E2E_REF^{commit}")), not the working tree"
fi

# wait_for SECONDS WHAT COMMAND...: run COMMAND every 0.5s until it succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  local end; end=$(calc "$(now) + $limit")
  until "$@"; do
    if awk "BEGIN { exit !($(now) > $end) }"; then fail "timed out after ${limit}s waiting for $what"; fi
    sleep 0.5
  done
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q . && ! (: </dev/tcp/127.0.0.1/$p) 2>/dev/null; then
      echo "$p"; return
    fi
  done
  fail "no free port"
}

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

###############################################################################
phase engine
if ! command -v jq >/dev/null || ! command -v curl >/dev/null || ! command -v ss >/dev/null; then
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq jq curl iproute2 >/dev/null
fi
if docker info >/dev/null 2>&1; then
  log "using the running Docker engine ($(docker version -f '{{.Server.Version}}'))"
else
  if ! command -v dockerd >/dev/null; then
    log "installing Debian's docker.io"
    sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  fi
  command -v docker >/dev/null || fail "no docker CLI"
  DOCKERD_LOG=$(mktemp /tmp/compose-e2e-dockerd.XXXXXX.log)
  log "starting dockerd (log: $DOCKERD_LOG)"
  # Host networking only: no docker0 bridge, no iptables rules, no forwarding changes.
  # setsid: a Ctrl-C reaches this script, not dockerd, so the cleanup can still use it.
  sudo_ sh -c 'setsid dockerd --bridge=none --iptables=false --ip-forward=false >"$1" 2>&1 </dev/null & echo $!' \
    _ "$DOCKERD_LOG" >"$TMP/dockerd.pid"
  DOCKERD_PID=$(cat "$TMP/dockerd.pid")
  engine_up() { docker info >/dev/null 2>&1; }
  wait_for 60 "dockerd to answer" engine_up
  log "dockerd $(docker version -f '{{.Server.Version}}') started, pid $DOCKERD_PID"
fi
docker info -f 'storage {{.Driver}}, cgroup v{{.CgroupVersion}} ({{.CgroupDriver}}), runtime {{.DefaultRuntime}}' >&2

###############################################################################
phase compose
compose_ok() {
  have=$(docker compose version --short 2>/dev/null || true)
  have=${have#v}
  [ -n "$have" ] && [[ "$have" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] && version_ge "$have" "$COMPOSE_MIN"
}
# candidate [APT OPTIONS...]: the version of Debian's docker-compose package apt would install.
candidate() { apt-cache "$@" policy docker-compose 2>/dev/null | sed -n 's/^ *Candidate: *//p'; }
# compose_from_debian: Debian's docker-compose package when it is Compose v2 (Debian 13 on).
# When this machine's release has it, it is installed. Else the plugin is taken from the
# package of COMPOSE_DEBIAN_SUITE. Apt itself fetches it into a private apt directory, checking
# signatures against the machine's debian-archive-keyring. Nothing is installed or added to the
# machine's apt sources. It takes seconds, where building Compose takes minutes.
compose_from_debian() {
  command -v apt-get >/dev/null || return 1
  local c d=$TMP/apt-$COMPOSE_DEBIAN_SUITE mirror opts
  c=$(candidate)
  if [ -n "$c" ] && [ "$c" != "(none)" ] && version_ge "$c" "$COMPOSE_MIN"; then
    log "installing Debian's docker-compose $c"
    DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends docker-compose >/dev/null &&
      compose_ok && return 0
  fi
  mirror=${DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -v '^[[:space:]]*#' | grep -oE 'https?://[^][[:space:]]+/debian/?([[:space:]]|$)' | head -n1 | tr -d '[:space:]')}
  mirror=${mirror:-http://deb.debian.org/debian}
  [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] || return 1
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/parts" "$d/deb"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror%/} $COMPOSE_DEBIAN_SUITE main" >"$d/sources.list"
  opts=(-o "Dir::Etc::SourceList=$d/sources.list" -o "Dir::Etc::SourceParts=$d/parts"
    -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o Acquire::Languages=none
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false -o APT::Sandbox::User=root)
  log "fetching Debian $COMPOSE_DEBIAN_SUITE's docker-compose package from $mirror"
  apt-get -qq "${opts[@]}" update >&2 || return 1
  c=$(candidate "${opts[@]}")
  { [ -n "$c" ] && [ "$c" != "(none)" ] && version_ge "$c" "$COMPOSE_MIN"; } ||
    { log "Debian $COMPOSE_DEBIAN_SUITE has docker-compose '$c', not >= $COMPOSE_MIN"; return 1; }
  (cd "$d/deb" && apt-get -qq "${opts[@]}" download docker-compose >&2) || return 1
  dpkg-deb -x "$d"/deb/docker-compose_*.deb "$d/x" || return 1
  mkdir -p "$HOME/.docker/cli-plugins"
  install -m 0755 "$d/x/usr/libexec/docker/cli-plugins/docker-compose" "$HOME/.docker/cli-plugins/docker-compose"
  compose_ok || { rm -f "$HOME/.docker/cli-plugins/docker-compose"; return 1; }
  log "docker compose $have (Debian $COMPOSE_DEBIAN_SUITE's $c) installed as $HOME/.docker/cli-plugins/docker-compose"
}
# compose_from_source: Compose built through the Go module proxy (3 to 12 minutes, by the
# machine's load); the binary is cached for the next run.
compose_from_source() {
  local cache=${XDG_CACHE_HOME:-$HOME/.cache}/conveyor/compose-$COMPOSE_VERSION
  if ! [ -x "$cache/cmd" ] || [ "$("$cache/cmd" version --short 2>/dev/null)" != "${COMPOSE_VERSION#v}" ]; then
    command -v go >/dev/null || fail "Go is needed to build Docker Compose"
    log "building Docker Compose $COMPOSE_VERSION through the Go module proxy (3 to 12 minutes)"
    mkdir -p "$cache"
    GOBIN=$cache GOFLAGS=-buildvcs=false go install \
      -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
      "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION"
  fi
  mkdir -p "$HOME/.docker/cli-plugins"
  install -m 0755 "$cache/cmd" "$HOME/.docker/cli-plugins/docker-compose"
  have=$(docker compose version --short)
  [ "${have#v}" = "${COMPOSE_VERSION#v}" ] || fail "docker compose answers '$have' after installing $COMPOSE_VERSION"
  log "docker compose $have installed as $HOME/.docker/cli-plugins/docker-compose"
}
if compose_ok; then
  log "docker compose $have is there (>= $COMPOSE_MIN)"
else
  [ -z "$have" ] || log "docker compose '$have' is older than $COMPOSE_MIN or unversioned"
  case "${E2E_COMPOSE_FROM:-debian}" in
    debian) compose_from_debian || { log "no Compose v2 from Debian's packages: building it"; compose_from_source; } ;;
    source) compose_from_source ;;
    *) fail "E2E_COMPOSE_FROM is debian or source, not '$E2E_COMPOSE_FROM'" ;;
  esac
fi

###############################################################################
phase standins
bash "$SRC/scripts/docker-standins.sh"

###############################################################################
# The two commands of README.md's "With Docker", with the override on top:
#   docker compose up --build          (here: up --build -d --wait, as a script cannot follow logs)
#   docker kill <one worker container> (phase recovery)
phase up
case "${E2E_BUILDER:-auto}" in
  auto) unset DOCKER_BUILDKIT ;;    # compose's default: BuildKit (the engine's own, through buildx's library)
  buildkit) export DOCKER_BUILDKIT=1 ;;
  classic) export DOCKER_BUILDKIT=0 ;;
  *) fail "E2E_BUILDER=$E2E_BUILDER: want auto, buildkit or classic" ;;
esac
E2E_GOPROXY=${GOPROXY:-$(go env GOPROXY 2>/dev/null || echo https://proxy.golang.org,direct)}
if [ -n "${E2E_REF:-}" ]; then
  E2E_REVISION=$(git rev-parse "$E2E_REF^{commit}")
  E2E_VERSION=$(git describe --tags --always "$E2E_REVISION" 2>/dev/null || echo dev)
else
  E2E_REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  E2E_VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
fi
export E2E_GOPROXY E2E_REVISION E2E_VERSION
# The token is the one README.md points to: .env's, not one this shell may have exported.
unset CONVEYOR_API_TOKEN
TOKEN=$(sed -n 's/^CONVEYOR_API_TOKEN=//p' "$SRC/.env" | tail -n1)
[ -n "$TOKEN" ] || fail ".env sets no CONVEYOR_API_TOKEN"
REDIS_PORT=$(free_port)
API_PORT=$(free_port)
while [ "$API_PORT" = "$REDIS_PORT" ]; do API_PORT=$(free_port); done
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
SERVICES=$(compose config --services)
log "project $PROJECT; services: $(echo $SERVICES); Redis on 127.0.0.1:$REDIS_PORT, API on 127.0.0.1:$API_PORT"
log "builder: DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-unset}; GOPROXY=$E2E_GOPROXY"
PROJECT_UP=1
IMAGE_BUILT=1
up0=$(now)
if ! compose up --build -d --wait --wait-timeout 120 --pull never >"$TMP/up.log" 2>&1; then
  tail -n 60 "$TMP/up.log" >&2
  compose ps -a >&2 || true; compose logs --tail 30 >&2 || true; fail "compose up --build"
fi
grep -E '^(#[0-9]+ (\[|DONE|CACHED)|Step [0-9]+/[0-9]+|.*Using cache)' "$TMP/up.log" | tail -n 30 >&2 || true
log "up --build -d --wait: $(calc "$(now) - $up0")s (build and start)"
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
log "image $IMAGE: $(docker image inspect -f '{{.Id}}' "$IMAGE" | cut -c8-19), $size bytes ($(calc "$size / 1048576") MiB)"
[ "$(docker image inspect -f '{{.Config.User}}' "$IMAGE")" = 65532:65532 ] || fail "image does not run as 65532:65532"
[ "$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.revision"}}' "$IMAGE")" = "$E2E_REVISION" ] ||
  fail "image label org.opencontainers.image.revision is not $E2E_REVISION"
# The image's own binary, to drive and check the stack from the host.
cid=$(docker create "$IMAGE")
docker cp "$cid:/usr/local/bin/conveyor" "$TMP/conveyor" >/dev/null
docker rm "$cid" >/dev/null
conv() { "$TMP/conveyor" --redis "$REDIS_URL" --log-level warn "$@"; }
redis_cid=$(compose ps -q redis)
[ "$(docker inspect -f '{{.State.Health.Status}}' "$redis_cid")" = healthy ] || fail "redis not healthy"
mapfile -t WORKERS < <(compose ps -q worker)
[ "${#WORKERS[@]}" -eq 3 ] || fail "want 3 worker containers, have ${#WORKERS[@]}"
declare -A WORKER_CID # worker name -> container id
workers_started() {
  local c name
  WORKER_CID=()
  for c in "${WORKERS[@]}"; do
    [ "$(docker inspect -f '{{.State.Running}}' "$c")" = true ] || return 1
    docker logs "$c" 2>&1 | grep -q 'worker started' || return 1
    name=$(docker logs "$c" 2>&1 | sed -n 's/.*starting worker.* worker=\([^ ]*\).*/\1/p' | tail -n1)
    [ -n "$name" ] || return 1
    WORKER_CID[$name]=$c
  done
}
wait_for 30 "3 workers to start" workers_started
for name in "${!WORKER_CID[@]}"; do log "worker $name in container ${WORKER_CID[$name]:0:12}"; done
# The whole test's traffic is on loopback: Redis listens on 127.0.0.1 only.
ss -Htln "sport = :$REDIS_PORT" | grep -q "127.0.0.1:$REDIS_PORT" || fail "redis does not listen on 127.0.0.1:$REDIS_PORT"
[ "$(conv stats --all --json | jq length)" -ge 0 ] || fail "stats"
# Idle footprint: the compose workers are busy with the producer's jobs, so one more worker of
# the image, on a queue nobody publishes to: Docker's view of its cgroup (RSS + cache less
# inactive file pages) and the process's own resident set (VmRSS).
IDLE_CID=$(docker run -d --network host --read-only --cap-drop ALL -e CONVEYOR_REDIS_URL="$REDIS_URL" \
  -e CONVEYOR_LOG_FORMAT=console "$IMAGE" worker --queue e2e-idle)
idle_started() { docker logs "$IDLE_CID" 2>&1 | grep -q 'worker started'; }
wait_for 30 "the idle worker to start" idle_started
sleep 5
log "idle worker: docker stats $(docker stats --no-stream --format '{{.MemUsage}} cpu {{.CPUPerc}}' "$IDLE_CID"), VmRSS $(awk '/^VmRSS/ {print $2 " " $3}' "/proc/$(docker inspect -f '{{.State.Pid}}' "$IDLE_CID")/status")"
docker rm -f "$IDLE_CID" >/dev/null && IDLE_CID=
log "redis: docker stats $(docker stats --no-stream --format '{{.MemUsage}}' "$redis_cid")"

###############################################################################
# job_field QUEUE ID FIELD: one field of a job's status JSON.
job_field() { conv status --queue "$1" --json "$2" | jq -r ".$3"; }
# all_status QUEUE STATUS IDS...: every job has the status (jobs found done are dropped from
# the PENDING list, so each poll asks only about the others).
PENDING=()
all_status() {
  local q=$1 want=$2 id s left=()
  for id in "${PENDING[@]}"; do
    s=$(job_field "$q" "$id" status)
    case "$s" in
      "$want") ;;
      failed|canceled) [ "$want" = "$s" ] || fail "job $id on $q: $s ($(job_field "$q" "$id" last_error))" ;;
      *) left+=("$id") ;;
    esac
  done
  PENDING=("${left[@]}")
  [ "${#PENDING[@]}" -eq 0 ]
}

phase jobs
mapfile -t echo_ids < <(compose run --rm --no-deps -T cli publish --type echo --payload '{"hello":"compose"}' --count 20)
[ "${#echo_ids[@]}" -eq 20 ] || fail "compose run publish printed ${#echo_ids[@]} ids, want 20"
mapfile -t noop_ids < <(conv publish --queue demo --type noop --count 20)
[ "${#noop_ids[@]}" -eq 20 ] || fail "publish printed ${#noop_ids[@]} ids"
flaky_id=$(conv publish --type flaky --payload '{"fail_times":1}' --max-retries 2)
fail_id=$(conv publish --type fail --payload '{"message":"e2e: meant to fail"}' --max-retries 0)
PENDING=("${echo_ids[@]}" "$flaky_id"); wait_for 60 "echo and flaky jobs to complete" all_status default completed
PENDING=("${noop_ids[@]}"); wait_for 60 "noop jobs on demo to complete" all_status demo completed
PENDING=("$fail_id"); wait_for 60 "the failing job to fail" all_status default failed
[ "$(job_field default "${echo_ids[0]}" result | jq -c .)" = '{"hello":"compose"}' ] ||
  fail "echo result: $(job_field default "${echo_ids[0]}" result)"
[ "$(job_field default "$flaky_id" attempt)" = 2 ] || fail "flaky job: attempt $(job_field default "$flaky_id" attempt), want 2"
[ "$(job_field default "$fail_id" last_error)" = "e2e: meant to fail" ] || fail "failed job's error"
conv dead --help >/dev/null
dead=$(conv stats --json | jq .dead)
[ "$dead" -ge 1 ] || fail "dead set: $dead, want >= 1"
log "20 echo (via compose run), 20 noop on demo, 1 flaky (2 attempts): completed; 1 failing: dead"
# Spread: which workers ran the echo jobs.
for id in "${echo_ids[@]}"; do job_field default "$id" worker; done | sort | uniq -c | sed 's/^/    ran echo jobs: /' >&2

###############################################################################
if grep -qx api <<<"$SERVICES"; then
  phase api
  base=http://127.0.0.1:$API_PORT
  wait_for 30 "the API's /healthz" curl -fsS -o /dev/null "$base/healthz"
  curl -fsS -o /dev/null "$base/readyz" || fail "/readyz"
  api_cid=$(compose ps -q api)
  [ "$(docker inspect -f '{{.State.Health.Status}}' "$api_cid")" = healthy ] || fail "api not healthy (serve --probe)"
  post() { curl -sS -o "$TMP/post.json" -w '%{http_code}' -H 'Content-Type: application/json' "$@" \
    -d '{"type":"echo","payload":{"via":"api"}}' "$base/v1/queues/default/jobs"; }
  code=$(post)
  [ "$code" = 401 ] || fail "POST without the token: HTTP $code, want 401: $(cat "$TMP/post.json")"
  code=$(post -H "Authorization: Bearer $TOKEN")
  [ "$code" = 202 ] || fail "POST /v1/queues/default/jobs with .env's token: HTTP $code: $(cat "$TMP/post.json")"
  api_id=$(jq -r '.id // empty' "$TMP/post.json")
  [ -n "$api_id" ] || fail "POST answer without an id: $(cat "$TMP/post.json")"
  # Long-poll the job through the API until it is final, then check it the CLI's way too.
  got=$(curl -fsS -H "Authorization: Bearer $TOKEN" "$base/v1/queues/default/jobs/$api_id?wait=20s")
  [ "$(jq -r .status <<<"$got")" = completed ] || fail "the API's job after a 20s long poll: $got"
  [ "$(jq -c .result <<<"$got")" = '{"via":"api"}' ] || fail "the API's job's result: $got"
  PENDING=("$api_id"); wait_for 10 "the API's job to complete" all_status default completed
  curl -fsS -o "$TMP/index.html" "$base/" || fail "dashboard page"
  grep -qi '<html' "$TMP/index.html" || fail "the dashboard page is not HTML"
  # /metrics, on the same published port, behind the token.
  code=$(curl -sS -o /dev/null -w '%{http_code}' "$base/metrics")
  [ "$code" = 401 ] || fail "GET /metrics without the token: HTTP $code, want 401"
  curl -fsS -H "Authorization: Bearer $TOKEN" "$base/metrics" >"$TMP/metrics.txt" || fail "GET /metrics with the token"
  grep -q '^conveyor_' "$TMP/metrics.txt" || fail "/metrics has no conveyor_ series: $(head -c 300 "$TMP/metrics.txt")"
  metrics="/metrics: 401 without the token, $(grep -c '^conveyor_' "$TMP/metrics.txt") conveyor_ samples with it"
  log "API: healthy (serve --probe), /healthz, /readyz, POST 401 without the token, 202 with .env's ($api_id completed, long poll), dashboard; $metrics"
fi

if grep -qx producer <<<"$SERVICES"; then
  phase producer
  totals() { conv stats --all --json | jq -r '[(map(.enqueued) | add), (map(.completed) | add)] | @tsv'; }
  read -r enq0 done0 < <(totals)
  sleep 10
  read -r enq1 done1 < <(totals)
  [ "$enq1" -gt "$enq0" ] || fail "the producer published nothing in 10s"
  [ "$done1" -gt "$done0" ] || fail "nothing completed in 10s"
  log "producer: $((enq1 - enq0)) jobs published and $((done1 - done0)) completed in 10s"
fi

###############################################################################
phase recovery
recovered0=$(conv stats --json | jq .recovered)
mapfile -t sleep_ids < <(conv publish --type sleep --payload "{\"ms\":$SLEEP_MS}" --count 12)
# Started is in_progress or already completed: on a loaded machine the first jobs may finish
# (20 s) before the last one starts, and a job done is as started as one running. The bound is
# for a machine ten times slower than a quiet 2-core one, where all start within 2 s.
all_started() {
  local id s left=()
  for id in "${PENDING[@]}"; do
    s=$(job_field default "$id" status)
    case "$s" in
      in_progress|completed) ;;
      failed|canceled) fail "sleep job $id: $s ($(job_field default "$id" last_error))" ;;
      *) left+=("$id") ;;
    esac
  done
  PENDING=("${left[@]}")
  [ "${#PENDING[@]}" -eq 0 ]
}
PENDING=("${sleep_ids[@]}"); wait_for 60 "the sleep jobs to start" all_started
# The victim: the worker that holds the most of them, from one read of the leases (a status
# call per job took seconds on a loaded machine, while the jobs ran on).
ids_json=$(printf '%s\n' "${sleep_ids[@]}" | jq -R . | jq -sc .)
conv list --status in_progress --limit 1000 --json |
  jq -r --argjson ids "$ids_json" '.leases | to_entries[] | select(.key as $k | $ids | index($k)) | .value.worker' >"$TMP/holders"
sort "$TMP/holders" | uniq -c | sed 's/^/    holds sleep jobs: /' >&2
victim=$(sort "$TMP/holders" | uniq -c | sort -rn | awk 'NR == 1 {print $2}')
[ -n "$victim" ] || fail "no worker holds a sleep job"
victim_cid=${WORKER_CID[$victim]:-}
[ -n "$victim_cid" ] || fail "no container runs worker $victim"
log "SIGKILL worker $victim (container ${victim_cid:0:12}) holding $(grep -cx "$victim" "$TMP/holders") of 12 jobs"
finished0=$(docker inspect -f '{{.State.FinishedAt}}' "$victim_cid")
docker kill "$victim_cid" >/dev/null # SIGKILL, as README's command
# Its process has exited once the container's end time moves (even if Docker restarted it: a
# restarted worker has a new name).
victim_dead() { [ "$(docker inspect -f '{{.State.FinishedAt}}' "$victim_cid")" != "$finished0" ]; }
wait_for 30 "the killed worker's process to exit" victim_dead
# Every outcome the victim wrote, it wrote before it died: stamped before this moment.
killed=$(now)
# Every job completes; the lost ones within visibility timeout + scan interval + a run.
PENDING=("${sleep_ids[@]}")
wait_for $((VISIBILITY + RECOVERY_INTERVAL + SLEEP_MS / 1000 + 30)) "all sleep jobs to complete" all_status default completed
log "all 12 completed $(calc "$(now) - $killed")s after the kill"
# Who held a job at the moment of the kill is what the job says once done, not what the lease
# list said before it (on a loaded machine the victim may finish jobs between the two): a job
# the victim held when it died has a lost attempt naming it; any other job the victim finished
# must have finished before the kill.
lost=()
first_rerun=
for id in "${sleep_ids[@]}"; do
  st=$(conv status --queue default --json "$id")
  w=$(jq -r .worker <<<"$st")
  a=$(jq -r .attempt <<<"$st")
  if grep -q "lost: worker $victim" <<<"$(jq -r .last_error <<<"$st")"; then
    lost+=("$id")
    [ "$w" != "$victim" ] || fail "job $id completed on the killed worker after its attempt there was lost"
    [ "$a" -ge 2 ] || fail "job $id: attempt $a, want >= 2 (the lost attempt counts)"
    started=$(jq -r .started_at <<<"$st")
    [ -n "$first_rerun" ] && [ "$first_rerun" -le "$started" ] || first_rerun=$started
  elif [ "$w" = "$victim" ]; then
    done_at=$(jq -r .completed_at <<<"$st")
    awk "BEGIN { exit !($done_at / 1000 <= $killed) }" || fail "job $id completed on the killed worker $(calc "$done_at / 1000 - $killed")s after the kill"
  fi
done
[ "${#lost[@]}" -gt 0 ] || fail "the killed worker held none of the jobs when it died (jobs of ${SLEEP_MS}ms ended before the kill)"
recovered=$(( $(conv stats --json | jq .recovered) - recovered0 ))
[ "$recovered" -ge "${#lost[@]}" ] || fail "recovered counter +$recovered, want >= ${#lost[@]}"
log "the killed worker's ${#lost[@]} jobs ran again (attempt 2) on the others; recovered counter +$recovered;" \
  "first re-run $(calc "$first_rerun / 1000 - $killed")s after the kill (visibility timeout ${VISIBILITY}s)"
log "killed container: $(docker inspect -f 'status {{.State.Status}}, restarts {{.RestartCount}}' "$victim_cid")"
if grep -qx api <<<"$SERVICES"; then
  got=$(curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT/v1/queues/default/jobs/${lost[0]}")
  [ "$(jq -r .status <<<"$got")" = completed ] && [ "$(jq -r .attempt <<<"$got")" -ge 2 ] ||
    fail "a recovered job through the API: $got"
  log "the API shows recovered job ${lost[0]}: completed, attempt $(jq -r .attempt <<<"$got"), worker $(jq -r .worker <<<"$got")"
fi
running=$(for c in "${WORKERS[@]}"; do docker inspect -f '{{.State.Running}}' "$c"; done | grep -c true || true)
[ "$running" -ge 2 ] || fail "only $running workers running after the kill"

###############################################################################
if [ "${E2E_KEEP:-0}" = 1 ]; then
  log "E2E_KEEP=1: Redis at $REDIS_URL; stop with: E2E_IMAGE=$IMAGE E2E_REDIS_PORT=$REDIS_PORT docker compose -f docker-compose.yml -f docker-compose.e2e.yml -p $PROJECT down -v; docker rmi $IMAGE"
  STATUS=0
  exit 0
fi
phase down
compose down -v --remove-orphans --timeout 45 >&2
PROJECT_UP=0
[ -z "$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")" ] || fail "containers left"
[ -z "$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")" ] || fail "volumes left"
STATUS=0
