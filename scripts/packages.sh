# Sourced by scripts/test.sh and .ci/run: installs the Debian packages a fresh machine lacks,
# so that the README's test command sets itself up. Nothing is installed when everything is
# there, when CONVEYOR_NO_INSTALL=1, or when this is neither root nor allowed a password-less
# sudo: the missing pieces are then named with the command that installs them.
#
#   need PATH_OR_COMMAND PACKAGE   notes PACKAGE when the command (or the absolute path) is missing
#   need_test_packages             notes what scripts/test.sh needs: redis-server, redis-cli and
#                                  the dashboard's browser test's Chromium
#   install_needed                 installs what was noted: `apt-get update` once per run (shared
#                                  with nested scripts through CONVEYOR_APT_UPDATED), then one
#                                  `apt-get install`; returns 1, naming them, if any is still missing
#
# Packages: redis-server and redis-tools (the tests' private servers: never the one on 6379),
# chromium (e2e/dashboard/dashboard_browser_test.go drives it; $CONVEYOR_CHROMIUM names another binary,
# CONVEYOR_BROWSER_TEST=skip skips that test and needs none), postgresql (internal/pgtest starts
# private servers with its initdb and postgres, under /usr/lib/postgresql/VERSION/bin, for the
# outbox's tests; $CONVEYOR_PG_BIN names another directory; never the cluster on 5432).

PKG_NEED=()  # packages to install
PKG_CHECK=() # what must exist once they are: commands or absolute paths

have() {
  case "$1" in
    *'*'*) compgen -G "$1" >/dev/null ;; # a pattern: some version of a versioned path
    /*) [ -x "$1" ] ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

need() {
  PKG_CHECK+=("$1")
  have "$1" && return 0
  case " ${PKG_NEED[*]} " in *" $2 "*) ;; *) PKG_NEED+=("$2") ;; esac
}

need_test_packages() {
  need redis-server redis-server
  need redis-cli redis-tools
  if [ "${CONVEYOR_BROWSER_TEST:-}" != skip ]; then
    if [ -n "${CONVEYOR_CHROMIUM:-}" ]; then
      PKG_CHECK+=("$CONVEYOR_CHROMIUM") # a browser of the user's choice: not ours to install
    else
      need /usr/bin/chromium chromium
    fi
  fi
  if [ -n "${CONVEYOR_PG_BIN:-}" ]; then
    PKG_CHECK+=("$CONVEYOR_PG_BIN/postgres") # the user's choice: not ours to install
  else
    need '/usr/lib/postgresql/*/bin/postgres' postgresql
  fi
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

install_needed() {
  if [ ${#PKG_NEED[@]} -gt 0 ]; then
    if [ "${CONVEYOR_NO_INSTALL:-0}" = 1 ]; then
      echo "missing, not installed (CONVEYOR_NO_INSTALL=1): ${PKG_NEED[*]}"
    elif ! command -v apt-get >/dev/null 2>&1; then
      echo "missing: ${PKG_NEED[*]} (no apt-get here: install them with this system's package manager)"
    elif [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
      echo "missing: ${PKG_NEED[*]} (not root and no password-less sudo)"
    else
      echo "installing ${PKG_NEED[*]}"
      # Another apt may hold the lock on a shared machine: wait for it rather than fail.
      local apt=(apt-get -q -o DPkg::Lock::Timeout=600)
      if [ "${CONVEYOR_APT_UPDATED:-0}" != 1 ]; then
        as_root "${apt[@]}" update -qq || echo "apt-get update failed; installing from the lists there are"
        export CONVEYOR_APT_UPDATED=1
      fi
      # A package's service may fail to start without systemd (redis-server's: the tests start
      # their own servers; docker.io's: compose-e2e.sh starts dockerd itself); what counts is
      # whether the commands are there afterwards, checked below.
      DEBIAN_FRONTEND=noninteractive as_root "${apt[@]}" install -y -qq --no-install-recommends \
        "${PKG_NEED[@]}" >/dev/null || true
    fi
  fi
  local missing=() c
  for c in "${PKG_CHECK[@]}"; do have "$c" || missing+=("$c"); done
  PKG_NEED=()
  PKG_CHECK=()
  if [ ${#missing[@]} -gt 0 ]; then
    echo "still missing: ${missing[*]}"
    return 1
  fi
}
