# node.sh, sourced by npm-ci.sh and lint-python.sh: need_node NAME makes sure
# Node.js and npm are there, installing them with apt-get when missing and
# running as root; otherwise it exits, NAME saying who needs them.
need_node() {
  if command -v npm >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "$1: installing nodejs and npm with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    return 0
  fi
  echo "$1: Node.js 20 and npm are needed (Debian/Ubuntu: sudo apt-get install nodejs npm)" >&2
  exit 1
}
