#!/usr/bin/env bash
# Build local stand-ins for the three upstream base images that Dockerfile and
# docker-compose.yml name, for machines that reach no image registry. On a machine that can
# pull, you do not need this script: `docker compose up` pulls the real images.
#
# Each stand-in is a minimal root filesystem assembled from this machine's own files: its
# binaries, the shared libraries `ldd` lists for them with the loader, and every symlink on the
# way. A few files are written here (/etc/passwd, /etc/group, ...). All is streamed as one
# tarball into `docker import`, with the upstream image's settings (ENV, USER, WORKDIR,
# ENTRYPOINT, CMD, EXPOSE, VOLUME). Nothing is downloaded: a stand-in takes seconds, not a
# Debian bootstrap. The host's binaries must run on the host's libraries, which is all they are
# given. So the files keep their paths, under the host's merged /usr (/bin is a symlink to
# usr/bin, as here).
#
#   golang:1.26-bookworm                       (stands in for Docker Hub's official golang image)
#       this machine's Go (`go env GOROOT`, must be Go 1.26.x) as /usr/local/go, git with its
#       helpers (/usr/lib/git-core: git-remote-https for `GOPROXY=direct`) and templates, bash,
#       dash as /bin/sh and the coreutils, findutils, grep, sed, tar and gzip commands a build
#       step uses; this machine's CA bundle as /etc/ssl/certs/ca-certificates.crt (so a
#       TLS-intercepting egress proxy's CA the host trusts is trusted by `go mod download` in
#       the build stage too); GOPATH=/go, PATH and GOTOOLCHAIN=local as upstream.
#       Differs: no gcc, make, curl, wget, openssh-client, apt or the other buildpack-deps:scm
#       packages, so cgo builds fail (the Dockerfile builds with CGO_ENABLED=0).
#   gcr.io/distroless/static-debian12:nonroot  (stands in for Google's distroless static image)
#       /etc/passwd and /etc/group (root, nobody, nonroot 65532), /etc/nsswitch.conf,
#       /etc/os-release, the CA bundle /etc/ssl/certs/ca-certificates.crt (Debian's
#       ca-certificates as this machine has it in /usr/share/ca-certificates/mozilla, without
#       the machine's own additions), /tmp (1777), /root, /home/nonroot (owned by 65532);
#       USER 65532, WORKDIR /home/nonroot, SSL_CERT_FILE as upstream.
#       Differs: no tzdata (/usr/share/zoneinfo), no base-files/netbase files, no
#       /var/lib/dpkg/status.d package records for scanners. A static Go binary needs none.
#   redis:7.4-bookworm                         (stands in for Docker Hub's official redis image)
#       this machine's redis-server and redis-cli (Debian's redis-server and redis-tools,
#       installed when missing), setpriv, the same shell and commands as the golang stand-in,
#       user redis with uid/gid 999 as upstream, WORKDIR and VOLUME /data, EXPOSE 6379, and an
#       entrypoint that behaves like upstream's docker-entrypoint.sh: leading flags or a
#       *.conf imply redis-server, root drops to user redis (setpriv instead of gosu) after
#       chowning /data, umask 0077, CMD ["redis-server"].
#       Differs: Redis is the machine's (Debian bookworm: 7.0.x), not 7.4.x (no hash-field
#       expiry, for one); upstream compiles protected mode off, Debian's binary has it on, so
#       the entrypoint passes `--protected-mode no` right after redis-server (and after a
#       config file, if given; a later --protected-mode on the command line still wins).
#
# Every stand-in carries the label org.conveyorq.standin.hash. It hashes this script and what
# it copies: the Go version, and the size and time of each named binary and of the CA bundles.
# An image whose label matches is kept, so reruns are fast. A missing or stale image is
# rebuilt. An image of that name WITHOUT the label is assumed to be the real upstream image,
# and is left alone (set STANDINS_FORCE=1 to replace it).
#
# Usage: scripts/docker-standins.sh [golang|distroless|redis]...   (default: all three)
# Needs: a running Docker engine; root (or sudo) to set the files' owners and, on a machine
# that lacks them, to install redis-server, redis-tools, git or ca-certificates (apt-get,
# through scripts/packages.sh).
set -euo pipefail

GOLANG_IMAGE=golang:1.26-bookworm
DISTROLESS_IMAGE=gcr.io/distroless/static-debian12:nonroot
REDIS_IMAGE=redis:7.4-bookworm
LABEL=org.conveyorq.standin.hash
PATH_DEFAULT=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# What a shell in a stand-in can run (besides bash's builtins): what the Dockerfile's RUN
# steps use (sh, xargs, sort) and what a look inside with `docker run -it ... bash` expects.
USERLAND=(/bin/sh /bin/dash /bin/bash
  /bin/cat /bin/chmod /bin/chown /bin/cp /bin/date /bin/echo /bin/false /bin/true /bin/ln
  /bin/ls /bin/mkdir /bin/mktemp /bin/mv /bin/pwd /bin/readlink /bin/rm /bin/rmdir /bin/sleep
  /bin/touch /bin/uname /usr/bin/basename /usr/bin/dirname /usr/bin/env /usr/bin/head
  /usr/bin/id /usr/bin/sort /usr/bin/tail /usr/bin/tee /usr/bin/tr /usr/bin/wc
  /usr/bin/find /usr/bin/xargs /bin/grep /bin/sed /bin/tar /bin/gzip)
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

self=$(readlink -f "$0")
script_hash=$(sha256sum "$self" | cut -c1-16)

log() { printf '[standins] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "no Docker engine answers 'docker info'"

tmp=$(mktemp -d)
cleanup() { sudo_ rm -rf "$tmp"; }
trap cleanup EXIT

# needs_build IMAGE HASH: 0 when IMAGE must be (re)built.
needs_build() {
  local image=$1 want=$2 have
  if ! docker image inspect "$image" >/dev/null 2>&1; then return 0; fi
  have=$(docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$image" 2>/dev/null || true)
  if [ "$have" = "$want" ]; then
    log "$image: cached stand-in ($LABEL=$have)"; return 1
  fi
  if [ -z "$have" ] || [ "$have" = "<no value>" ]; then
    if [ "${STANDINS_FORCE:-0}" != 1 ]; then
      log "$image: present without $LABEL, taken as the upstream image; kept"; return 1
    fi
  fi
  log "$image: stale stand-in ($have != $want); rebuilding"
  STALE+=("$(docker image inspect -f '{{.Id}}' "$image")")
  return 0
}
STALE=()

# The host's files a stand-in copies, relative to /: HOST_FILES as they are (a symlink as a
# symlink), HOST_TREES whole. host_reset empties them.
HOST_FILES=()
HOST_TREES=()
declare -A SEEN=() REALDIR=()
host_reset() { HOST_FILES=(); HOST_TREES=(); SEEN=(); }

# host_add PATH...: each PATH at its real location (its directory with every symlink resolved:
# /bin/sh is usr/bin/sh on a merged-/usr host) and every hop of its symlink chain.
host_add() {
  local p d t
  for p in "$@"; do
    d=${p%/*}
    [ -n "$d" ] || d=/
    [ -n "${REALDIR[$d]:-}" ] || REALDIR[$d]=$(readlink -f "$d")
    d=${REALDIR[$d]}
    p=${d%/}/${p##*/}
    [ -z "${SEEN[$p]:-}" ] || continue
    SEEN[$p]=1
    [ -e "$p" ] || [ -L "$p" ] || die "$p: not on this machine"
    HOST_FILES+=("${p#/}")
    if [ -L "$p" ]; then
      t=$(readlink "$p")
      case $t in /*) ;; *) t=$d/$t ;; esac
      host_add "$t"
    fi
  done
}

# host_add_libs FILE...: the shared libraries, and the loader, that ldd lists for each ELF
# FILE (ldd lists the whole closure; it skips scripts and static binaries).
host_add_libs() {
  local lib
  while read -r lib; do host_add "$lib"; done < <(
    ldd "$@" 2>/dev/null |
      awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\// && $i !~ /:$/) print $i }' | sort -u)
}

# host_add_bins FILE...: host_add and host_add_libs.
host_add_bins() { host_add "$@"; host_add_libs "$@"; }

# files_key FILE...: what decides whether copies of the FILEs are current: their (resolved)
# size and modification time.
files_key() { stat -L -c '%n %s %Y' "$@" | sha256sum | cut -c1-16; }

# import_rootfs STAGE IMAGE CHANGE...: IMAGE from one tarball of STAGE (what this script
# wrote, with its owners) and the host's HOST_FILES and HOST_TREES (root's), each CHANGE a
# Dockerfile instruction for `docker import --change`. TAR_EXTRA: more tar options.
import_rootfs() {
  local stage=$1 image=$2 c f d
  shift 2
  local changes=()
  for c in "$@"; do changes+=(--change "$c"); done
  # The host's merged /usr as it is here; the parent directories of what is copied.
  for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then ln -sfn "$(readlink "/$d")" "$stage/$d"; fi
  done
  : >"$tmp/files.list"
  : >"$tmp/trees.list"
  for f in "${HOST_FILES[@]}"; do printf '%s\n' "$f" >>"$tmp/files.list"; done
  for f in "${HOST_TREES[@]}"; do printf '%s\n' "$f" >>"$tmp/trees.list"; done
  sed -n 's:/[^/]*$::p' "$tmp/files.list" "$tmp/trees.list" | sort -u |
    (cd "$stage" && xargs -r mkdir -p)
  sudo_ chown -R 0:0 "$stage"
  [ -z "${STAGE_OWNERS:-}" ] || sudo_ sh -c "$STAGE_OWNERS" _ "$stage"
  log "docker import $image ($(wc -l <"$tmp/files.list") files$( [ -s "$tmp/trees.list" ] && printf ' and %s' "$(paste -sd' ' "$tmp/trees.list")") from this machine)"
  # shellcheck disable=SC2086 # TAR_EXTRA: options, split on purpose
  sudo_ tar --numeric-owner ${TAR_EXTRA:-} -c -f - -C "$stage" . \
    -C / --no-recursion -T "$tmp/files.list" --recursion -T "$tmp/trees.list" |
    docker import "${changes[@]}" - "$image" >/dev/null
  STAGE_OWNERS=
  TAR_EXTRA=
}

# userland_stage STAGE: the files every shell stand-in writes: /etc/nsswitch.conf, /tmp, /root.
userland_stage() {
  local stage=$1
  mkdir -p "$stage/etc" "$stage/tmp" "$stage/root"
  printf 'hosts: files dns\n' >"$stage/etc/nsswitch.conf"
  chmod 1777 "$stage/tmp"
  chmod 0700 "$stage/root"
}

# packages.sh: `need` and `install_needed`, for a machine that lacks what is copied.
# shellcheck source=scripts/packages.sh
. "$(dirname "$self")/packages.sh"

build_golang() {
  local go gover goroot hash stage=$tmp/golang
  go=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$go" ] || die "no go on PATH nor /usr/local/go/bin/go: the golang stand-in copies this machine's Go"
  gover=$("$go" env GOVERSION) # go1.26.8
  case "$gover" in go1.26|go1.26.*) ;; *) die "$go is $gover, the image is named golang:1.26" ;; esac
  goroot=$(readlink -f "$("$go" env GOROOT)")
  need git git
  need /usr/share/ca-certificates/mozilla ca-certificates
  install_needed >&2 || die "the golang stand-in copies git and ca-certificates from this machine"
  hash=$(printf '%s %s %s %s %s' "$script_hash" "$gover" "$goroot" \
    "$(files_key "${USERLAND[@]}" /usr/bin/git /usr/lib/git-core/git-remote-https)" \
    "$(sha256sum <"$HOST_CA_BUNDLE")" | sha256sum | cut -c1-16)
  needs_build "$GOLANG_IMAGE" "$hash" || return 0
  host_reset
  host_add_bins "${USERLAND[@]}" /usr/bin/git
  # git's helpers: one ldd per distinct file (most of /usr/lib/git-core is hard links to git).
  HOST_TREES+=(usr/lib/git-core usr/share/git-core)
  mapfile -t helpers < <(find /usr/lib/git-core -type f -printf '%i %p\n' | sort -u -k1,1 | cut -d' ' -f2-)
  host_add_libs "${helpers[@]}"
  # Go from go.dev is static and self-contained: its tree is copied as it is, as /usr/local/go.
  HOST_TREES+=("${goroot#/}")
  if [ "$goroot" != /usr/local/go ]; then
    TAR_EXTRA="--transform=s,^$(sed 's/[.[\*^$]/\\&/g' <<<"${goroot#/}"),usr/local/go,S"
  fi
  userland_stage "$stage"
  mkdir -p "$stage/etc/ssl/certs" "$stage/go/src" "$stage/go/bin"
  cp "$HOST_CA_BUNDLE" "$stage/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$stage/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/etc/group"
  chmod 0644 "$stage"/etc/passwd "$stage"/etc/group "$stage/etc/ssl/certs/ca-certificates.crt"
  chmod -R 1777 "$stage/go"
  import_rootfs "$stage" "$GOLANG_IMAGE" \
    "ENV PATH=/go/bin:/usr/local/go/bin:$PATH_DEFAULT" \
    "ENV GOLANG_VERSION=${gover#go}" \
    "ENV GOTOOLCHAIN=local" \
    "ENV GOPATH=/go" \
    "WORKDIR /go" \
    'CMD ["bash"]' \
    "LABEL $LABEL=$hash" \
    "LABEL org.conveyorq.standin.for=docker.io/library/golang:1.26-bookworm"
  docker run --rm --network none "$GOLANG_IMAGE" sh -c \
    'go version && git --version && git init -q /tmp/t && echo x | xargs echo | sort >/dev/null' >&2 ||
    die "$GOLANG_IMAGE: the stand-in does not run go and git"
}

build_distroless() {
  local hash stage=$tmp/distroless
  need /usr/share/ca-certificates/mozilla ca-certificates
  install_needed >&2 || die "the distroless stand-in copies Debian's CA certificates from this machine"
  hash=$(printf '%s %s' "$script_hash" "$(cat /usr/share/ca-certificates/mozilla/*.crt | sha256sum)" |
    sha256sum | cut -c1-16)
  needs_build "$DISTROLESS_IMAGE" "$hash" || return 0
  host_reset
  mkdir -p "$stage/etc/ssl/certs" "$stage/tmp" "$stage/root" "$stage/home/nonroot"
  # The CA bundle of Debian's ca-certificates (the Mozilla set, without this machine's extra
  # anchors): the runtime image trusts what upstream's trusts.
  cat /usr/share/ca-certificates/mozilla/*.crt >"$stage/etc/ssl/certs/ca-certificates.crt"
  [ -s "$stage/etc/ssl/certs/ca-certificates.crt" ] || die "empty CA bundle"
  cat >"$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$stage/etc/group" <<'EOF'
root:x:0:
tty:x:5:
staff:x:50:
nobody:x:65534:
nonroot:x:65532:
EOF
  printf 'hosts: files dns\n' >"$stage/etc/nsswitch.conf"
  cat >"$stage/etc/os-release" <<'EOF'
PRETTY_NAME="Distroless (local stand-in)"
NAME="Debian GNU/Linux"
ID="debian"
VERSION_ID="12"
VERSION="Debian GNU/Linux 12 (bookworm)"
HOME_URL="https://github.com/GoogleContainerTools/distroless"
EOF
  chmod 0644 "$stage"/etc/passwd "$stage"/etc/group "$stage"/etc/nsswitch.conf "$stage"/etc/os-release \
    "$stage/etc/ssl/certs/ca-certificates.crt"
  chmod 1777 "$stage/tmp"
  chmod 0700 "$stage/root" "$stage/home/nonroot"
  # shellcheck disable=SC2016 # expanded by that shell
  STAGE_OWNERS='chown 65532:65532 "$1/home/nonroot"'
  import_rootfs "$stage" "$DISTROLESS_IMAGE" \
    "ENV PATH=$PATH_DEFAULT" \
    "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
    "USER 65532" \
    "WORKDIR /home/nonroot" \
    "LABEL $LABEL=$hash" \
    "LABEL org.conveyorq.standin.for=gcr.io/distroless/static-debian12:nonroot"
}

build_redis() {
  local hash stage=$tmp/redis
  need redis-server redis-server
  need redis-cli redis-tools
  need setpriv util-linux
  install_needed >&2 || die "the redis stand-in copies this machine's redis-server, redis-cli and setpriv"
  hash=$(printf '%s %s' "$script_hash" \
    "$(files_key "${USERLAND[@]}" "$(command -v redis-server)" "$(command -v redis-cli)" "$(command -v setpriv)")" |
    sha256sum | cut -c1-16)
  needs_build "$REDIS_IMAGE" "$hash" || return 0
  host_reset
  host_add_bins "${USERLAND[@]}" "$(command -v redis-server)" "$(command -v redis-cli)" "$(command -v setpriv)"
  userland_stage "$stage"
  mkdir -p "$stage/usr/local/bin" "$stage/data"
  cat >"$stage/usr/local/bin/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# Like the official redis image's docker-entrypoint.sh (setpriv stands in for gosu).
set -e
# first arg is `-f` or `--some-option`, or a config file `something.conf`
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi
# allow the container to be started with `--user`
if [ "$1" = 'redis-server' ] && [ "$(id -u)" = '0' ]; then
	find . \! -user redis -exec chown redis '{}' +
	exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi
if [ "$1" = 'redis-server' ]; then
	# The official image compiles protected mode off; Debian's redis-server has it on, which
	# refuses password-less clients from other containers. A config file must stay first.
	shift
	conf=
	if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then conf=$1; shift; fi
	set -- redis-server ${conf:+"$conf"} --protected-mode no "$@"
fi
# set an appropriate umask (if one isn't set already)
um="$(umask)"
if [ "$um" = '0022' ]; then
	umask 0077
fi
exec "$@"
EOF
  chmod 0755 "$stage/usr/local/bin/docker-entrypoint.sh"
  # uid/gid 999 as upstream.
  printf '%s\n' 'root:x:0:0:root:/root:/bin/bash' 'redis:x:999:999::/home/redis:/usr/sbin/nologin' \
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' >"$stage/etc/passwd"
  printf '%s\n' 'root:x:0:' 'redis:x:999:' 'nogroup:x:65534:' >"$stage/etc/group"
  chmod 0644 "$stage"/etc/passwd "$stage"/etc/group
  # shellcheck disable=SC2016 # expanded by that shell
  STAGE_OWNERS='chown 999:999 "$1/data"'
  import_rootfs "$stage" "$REDIS_IMAGE" \
    "ENV PATH=$PATH_DEFAULT" \
    "WORKDIR /data" \
    "VOLUME /data" \
    "EXPOSE 6379" \
    'ENTRYPOINT ["docker-entrypoint.sh"]' \
    'CMD ["redis-server"]' \
    "LABEL $LABEL=$hash" \
    "LABEL org.conveyorq.standin.for=docker.io/library/redis:7.4-bookworm"
  docker run --rm --network none --entrypoint sh "$REDIS_IMAGE" -c \
    'command -v setpriv && redis-server --version && redis-cli --version && id redis' >&2 ||
    die "$REDIS_IMAGE: the stand-in does not run redis-server, redis-cli and setpriv"
}

[ $# -gt 0 ] || set -- golang distroless redis
for what in "$@"; do
  case "$what" in
    golang) build_golang ;;
    distroless) build_distroless ;;
    redis) build_redis ;;
    *) die "unknown stand-in '$what' (golang, distroless or redis)" ;;
  esac
done
# Superseded stand-ins, now untagged: removed unless something still uses them (then Docker
# refuses, and they stay).
for id in "${STALE[@]}"; do docker rmi "$id" >/dev/null 2>&1 || true; done
for image in "$GOLANG_IMAGE" "$DISTROLESS_IMAGE" "$REDIS_IMAGE"; do
  docker image inspect -f "{{ .Size }}" "$image" >/dev/null 2>&1 &&
    log "$image: $(docker image inspect -f '{{ .Id }}' "$image" | cut -c8-19), $(( $(docker image inspect -f '{{ .Size }}' "$image") / 1048576 )) MiB"
done
