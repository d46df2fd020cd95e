#!/usr/bin/env bash
# make container-test: builds deploy/worker/Containerfile and runs
# TestWorkerContainerImage against a Docker daemon of its own, on a socket
# of its own, so that no other test sees it. make test leaves the image
# unbuilt where no runtime answers; this brings one up. As root it
# installs docker.io (and debootstrap, when the base image cannot be
# pulled: it is then made from Debian's packages, as debian:12-slim is).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "make container-test starts a Docker daemon: run it as root" >&2; exit 1; }
scripts/ensure-deps.sh dockerd:docker.io debootstrap:debootstrap
dir=$(mktemp -d /tmp/kusaw-dockerd-XXXXXX)
export DOCKER_HOST=unix://$dir/docker.sock
dockerd -H "$DOCKER_HOST" --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$dir/pid" >"$dir/log" 2>&1 &
stop() { kill "$(cat "$dir/pid" 2>/dev/null)" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap stop EXIT
for _ in $(seq 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
docker info >/dev/null || { echo "dockerd did not start:"; tail -5 "$dir/log"; exit 1; } >&2
base=docker.io/library/debian:12-slim
if ! docker pull -q "$base" >/dev/null 2>&1; then
  echo "cannot pull $base: making it with debootstrap from deb.debian.org" >&2
  debootstrap --variant=minbase bookworm "$dir/rootfs" http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 ||
    { tail -5 "$dir/debootstrap.log" >&2; exit 1; }
  tar -C "$dir/rootfs" -c . | docker import - "$base" >/dev/null
fi
go test -count=1 -run 'TestWorkerContainer' -v ./e2e/
