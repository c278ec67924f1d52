#!/usr/bin/env bash
# generators.sh makes sure the code generators outside Go are present:
# Debian's protoc and gRPC Python plugin (apt-get, when missing and running
# as root) and protoc-gen-es from client/typescript's lockfile (npm ci). buf
# and the Go plugins are pinned in tools/go.mod and need nothing here.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v protoc >/dev/null 2>&1 || [ ! -x /usr/bin/grpc_python_plugin ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "generators: installing protobuf-compiler and protobuf-compiler-grpc with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler protobuf-compiler-grpc >/dev/null
  else
    echo "generators: protoc and /usr/bin/grpc_python_plugin are needed (Debian: apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2
    exit 1
  fi
fi

./scripts/npm-ci.sh client/typescript
