#!/usr/bin/env bash
# Build local stand-ins for the three upstream base images that Dockerfile and
# docker-compose.yml name, for machines that reach Debian's package mirror but no image
# registry. On a machine that can pull, you do not need this script: `docker compose up`
# pulls the real images.
#
#   golang:1.26-bookworm                       (stands in for Docker Hub's official golang image)
#       an mmdebstrap bookworm minbase rootfs with ca-certificates and git, plus this machine's
#       /usr/local/go (must be Go 1.26.x); GOPATH=/go, PATH and GOTOOLCHAIN=local as upstream.
#       Differs: no gcc, make, curl, wget, openssh-client or the other buildpack-deps:scm
#       packages, so cgo builds fail (the Dockerfile builds with CGO_ENABLED=0).
#   gcr.io/distroless/static-debian12:nonroot  (stands in for Google's distroless static image)
#       /etc/passwd and /etc/group (root, nobody, nonroot 65532), /etc/nsswitch.conf,
#       /etc/os-release, the CA bundle /etc/ssl/certs/ca-certificates.crt (taken from the
#       golang image above, i.e. Debian's ca-certificates), /tmp (1777), /root, /home/nonroot
#       (owned by 65532); USER 65532, WORKDIR /home/nonroot, SSL_CERT_FILE as upstream.
#       Differs: no tzdata (/usr/share/zoneinfo), no base-files/netbase files, no
#       /var/lib/dpkg/status.d package records for scanners. A static Go binary needs none.
#   redis:7.4-bookworm                         (stands in for Docker Hub's official redis image)
#       an mmdebstrap bookworm minbase rootfs with Debian's redis-server and redis-tools, user
#       redis with uid/gid 999 as upstream, WORKDIR and VOLUME /data, EXPOSE 6379, and an
#       entrypoint that behaves like upstream's docker-entrypoint.sh: leading flags or a
#       *.conf imply redis-server, root drops to user redis (setpriv instead of gosu) after
#       chowning /data, umask 0077, CMD ["redis-server"].
#       Differs: Redis is Debian's 7.0.x, not 7.4.x (no hash-field expiry, for one); upstream
#       compiles protected mode off, Debian's binary has it on, so the entrypoint passes
#       `--protected-mode no` right after redis-server (and after a config file, if given;
#       a later --protected-mode on the command line still wins).
#
# Every stand-in carries the label org.conveyorq.standin.hash, a hash of this script (and,
# for golang, of the Go version copied in). An image whose label matches is kept, so reruns
# are fast; a missing or stale image is rebuilt. An image of that name WITHOUT the label is
# assumed to be the real upstream image and is left alone (set STANDINS_FORCE=1 to replace
# it). The rootfs packages come from the Debian mirror that apt uses on this machine
# (/etc/apt/sources.list*), or from DEBIAN_MIRROR / DEBIAN_SECURITY_MIRROR when set.
#
# Usage: scripts/docker-standins.sh [golang|distroless|redis]...   (default: all three)
# Needs: root (or sudo) for mmdebstrap's root mode, a running Docker engine.
set -euo pipefail

GOLANG_IMAGE=golang:1.26-bookworm
DISTROLESS_IMAGE=gcr.io/distroless/static-debian12:nonroot
REDIS_IMAGE=redis:7.4-bookworm
LABEL=org.conveyorq.standin.hash
SUITE=bookworm
PATH_DEFAULT=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

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

# apt_mirrors sets MIRROR and SECURITY_MIRROR from the host's apt sources (one-line or deb822).
apt_mirrors() {
  local uris f files=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  uris=$(cat "${files[@]}" /dev/null |
    sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' |
    tr ' ' '\n' | sed 's:/*$::')
  MIRROR=${DEBIAN_MIRROR:-$(grep -m1 -E '/debian$' <<<"$uris" || true)}
  SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-$(grep -m1 -E '/debian-security$' <<<"$uris" || true)}
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
  [ -n "$SECURITY_MIRROR" ] || SECURITY_MIRROR=http://deb.debian.org/debian-security
}

ensure_mmdebstrap() {
  command -v mmdebstrap >/dev/null && return
  log "installing mmdebstrap"
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
}

# debootstrap_tar OUT PACKAGES [mmdebstrap options...]: a minbase bookworm rootfs as a tarball.
debootstrap_tar() {
  local out=$1 pkgs=$2; shift 2
  ensure_mmdebstrap
  apt_mirrors
  log "mmdebstrap $SUITE (+$pkgs) from $MIRROR"
  sudo_ mmdebstrap --quiet --mode=root --variant=minbase --include="$pkgs" \
    --aptopt='Acquire::Retries "3"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$@" "$SUITE" "$out" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main"
}

# extra_ca DIR: write each certificate of the host's CA bundle (HOST_CA_BUNDLE, by default
# /etc/ssl/certs/ca-certificates.crt) that Debian's ca-certificates does not ship into DIR, one
# file each (what update-ca-certificates wants in /usr/local/share/ca-certificates). Set
# STANDINS_EXTRA_CA=0 to add none.
extra_ca() {
  local dir=$1 host=${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
  mkdir -p "$dir"
  [ "${STANDINS_EXTRA_CA:-1}" = 1 ] && [ -r "$host" ] && [ -d /usr/share/ca-certificates ] || return 0
  # Certificates the host's bundle holds and none of Debian's certificate files (any release's
  # ca-certificates in /usr/share/ca-certificates) holds.
  find /usr/share/ca-certificates -name '*.crt' -exec cat {} + |
    awk -v dir="$dir" '
      FNR == 1 { file++ }
      /-----BEGIN CERTIFICATE-----/ { pem = ""; inside = 1 }
      inside { pem = pem $0 "\n" }
      /-----END CERTIFICATE-----/ {
        inside = 0
        if (file == 1) { known[pem] = 1 }
        else if (!(pem in known)) { n++; printf "%s", pem > (dir "/host-extra-" n ".crt") }
      }' - "$host"
  if ls "$dir"/*.crt >/dev/null 2>&1; then
    log "adding $(ls "$dir"/*.crt | wc -l) CA certificate(s) of this machine's bundle that Debian's lacks to $GOLANG_IMAGE"
  fi
}

build_golang() {
  local gover hash
  [ -x /usr/local/go/bin/go ] || die "/usr/local/go/bin/go not found: the golang stand-in copies this machine's Go"
  gover=$(/usr/local/go/bin/go env GOVERSION) # go1.26.8
  case "$gover" in go1.26|go1.26.*) ;; *) die "/usr/local/go is $gover, the image is named golang:1.26" ;; esac
  hash=$(printf '%s %s' "$script_hash" "$gover" | sha256sum | cut -c1-16)
  # Trust anchors this machine adds to Debian's (a TLS-intercepting egress proxy's CA, say):
  # without them `go mod download` in the build stage fails with "x509: certificate signed by
  # unknown authority". They are the host bundle's certificates that Debian's lacks.
  extra_ca "$tmp/extra-ca"
  hash=$(printf '%s %s %s' "$script_hash" "$gover" "$(cat "$tmp"/extra-ca/*.crt 2>/dev/null | sha256sum)" |
    sha256sum | cut -c1-16)
  needs_build "$GOLANG_IMAGE" "$hash" || return 0
  debootstrap_tar "$tmp/golang.tar" ca-certificates,git \
    --customize-hook='cp -a /usr/local/go "$1/usr/local/go"' \
    --customize-hook="if ls '$tmp'/extra-ca/*.crt >/dev/null 2>&1; then cp '$tmp'/extra-ca/*.crt \"\$1/usr/local/share/ca-certificates/\" && chroot \"\$1\" update-ca-certificates; fi" \
    --customize-hook='mkdir -p "$1/go/src" "$1/go/bin" && chmod -R 1777 "$1/go"'
  log "docker import $GOLANG_IMAGE"
  docker import \
    --change "ENV PATH=/go/bin:/usr/local/go/bin:$PATH_DEFAULT" \
    --change "ENV GOLANG_VERSION=${gover#go}" \
    --change "ENV GOTOOLCHAIN=local" \
    --change "ENV GOPATH=/go" \
    --change "WORKDIR /go" \
    --change 'CMD ["bash"]' \
    --change "LABEL $LABEL=$hash" \
    --change "LABEL org.conveyorq.standin.for=docker.io/library/golang:1.26-bookworm" \
    "$tmp/golang.tar" "$GOLANG_IMAGE" >/dev/null
  sudo_ rm -f "$tmp/golang.tar"
}

build_distroless() {
  local hash=$script_hash root=$tmp/distroless cid
  needs_build "$DISTROLESS_IMAGE" "$hash" || return 0
  docker image inspect "$GOLANG_IMAGE" >/dev/null 2>&1 || build_golang
  mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/root" "$root/home/nonroot"
  # The CA bundle of Debian's ca-certificates (the golang image's Mozilla set, without the
  # machine's extra anchors added there): the runtime image trusts what upstream's trusts.
  docker run --rm --network none --entrypoint sh "$GOLANG_IMAGE" -c \
    'cat /usr/share/ca-certificates/mozilla/*.crt' >"$root/etc/ssl/certs/ca-certificates.crt"
  [ -s "$root/etc/ssl/certs/ca-certificates.crt" ] || die "empty CA bundle"
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
tty:x:5:
staff:x:50:
nobody:x:65534:
nonroot:x:65532:
EOF
  printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
  cat >"$root/etc/os-release" <<'EOF'
PRETTY_NAME="Distroless (local stand-in)"
NAME="Debian GNU/Linux"
ID="debian"
VERSION_ID="12"
VERSION="Debian GNU/Linux 12 (bookworm)"
HOME_URL="https://github.com/GoogleContainerTools/distroless"
EOF
  chmod 0644 "$root"/etc/passwd "$root"/etc/group "$root"/etc/nsswitch.conf "$root"/etc/os-release \
    "$root/etc/ssl/certs/ca-certificates.crt"
  chmod 1777 "$root/tmp"
  chmod 0700 "$root/root" "$root/home/nonroot"
  sudo_ chown -R 0:0 "$root"
  sudo_ chown 65532:65532 "$root/home/nonroot"
  sudo_ tar --numeric-owner -C "$root" -cf "$tmp/distroless.tar" .
  log "docker import $DISTROLESS_IMAGE"
  docker import \
    --change "ENV PATH=$PATH_DEFAULT" \
    --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
    --change "USER 65532" \
    --change "WORKDIR /home/nonroot" \
    --change "LABEL $LABEL=$hash" \
    --change "LABEL org.conveyorq.standin.for=gcr.io/distroless/static-debian12:nonroot" \
    "$tmp/distroless.tar" "$DISTROLESS_IMAGE" >/dev/null
}

build_redis() {
  local hash=$script_hash
  needs_build "$REDIS_IMAGE" "$hash" || return 0
  cat >"$tmp/docker-entrypoint.sh" <<'EOF'
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
  chmod 0755 "$tmp/docker-entrypoint.sh"
  # uid/gid 999 as upstream: base-passwd has made /etc/passwd by the essential hook, and the
  # packages' adduser --system keeps an existing system user.
  debootstrap_tar "$tmp/redis.tar" redis-server,redis-tools \
    --essential-hook='echo "redis:x:999:999::/var/lib/redis:/usr/sbin/nologin" >>"$1/etc/passwd"' \
    --essential-hook='echo "redis:x:999:" >>"$1/etc/group"' \
    --essential-hook='if [ -e "$1/etc/shadow" ]; then echo "redis:*:19000:0:99999:7:::" >>"$1/etc/shadow"; fi' \
    --essential-hook='if [ -e "$1/etc/gshadow" ]; then echo "redis:!::" >>"$1/etc/gshadow"; fi' \
    --customize-hook="cp '$tmp/docker-entrypoint.sh' \"\$1/usr/local/bin/docker-entrypoint.sh\"" \
    --customize-hook='mkdir -p "$1/data" && chroot "$1" chown redis:redis /data' \
    --customize-hook='chroot "$1" sh -c "command -v setpriv && redis-server --version && redis-cli --version && id redis"'
  log "docker import $REDIS_IMAGE"
  docker import \
    --change "ENV PATH=$PATH_DEFAULT" \
    --change "WORKDIR /data" \
    --change "VOLUME /data" \
    --change "EXPOSE 6379" \
    --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
    --change 'CMD ["redis-server"]' \
    --change "LABEL $LABEL=$hash" \
    --change "LABEL org.conveyorq.standin.for=docker.io/library/redis:7.4-bookworm" \
    "$tmp/redis.tar" "$REDIS_IMAGE" >/dev/null
  sudo_ rm -f "$tmp/redis.tar"
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
