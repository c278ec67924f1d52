# apt.sh, sourced by the scripts that need system packages: need_debs NAME
# CHECK DEB... runs CHECK (a command or function); when it fails, installs
# the Debian packages DEB... with apt-get (when running as root) and runs it
# again. If it still fails, it exits, NAME saying what to install.
need_debs() {
  local name=$1 check=$2
  shift 2
  if $check >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "$name: installing $* with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    if $check >/dev/null 2>&1; then
      return 0
    fi
  fi
  echo "$name: missing what these Debian/Ubuntu packages provide: sudo apt-get install $*" >&2
  exit 1
}

# need_node NAME: Node.js and npm.
need_node() { need_debs "$1" "command -v npm" nodejs npm; }
