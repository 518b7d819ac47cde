#!/usr/bin/env bash
# Makes sure the Redis and PostgreSQL servers that the tests talk to are up:
# starts them when they are installed but down, and on a fresh Debian machine
# (as root) installs them with apt-get first. A server named by
# IDEM_TEST_REDIS_URL or IDEM_TEST_DATABASE_URL is left alone.
set -euo pipefail

reachable() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

apt_updated=""
install() {
  if [ "$(id -u)" != 0 ]; then
    echo "services: $1 is not installed and this is not root: install it, or set IDEM_TEST_${2}_URL" >&2
    exit 1
  fi
  [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
  # shellcheck disable=SC2086 # $1 may name several packages
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $1 >/dev/null
}

wait_port() {
  for _ in $(seq 1 50); do reachable "$1" && return 0; sleep 0.2; done
  echo "services: $2 did not come up on 127.0.0.1:$1" >&2
  exit 1
}

# go test -race needs cgo, and the breach lab compiles a small clock shim.
command -v cc >/dev/null || install "gcc libc6-dev" CC

# redis-server also brings redis-cli, which the cluster tests use.
if [ -z "${IDEM_TEST_REDIS_URL:-}" ] && ! reachable 6379; then
  command -v redis-server >/dev/null || install redis-server REDIS
  if ! reachable 6379; then # the package may have started it already
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
  fi
  wait_port 6379 Redis
fi

if [ -z "${IDEM_TEST_DATABASE_URL:-}" ] && ! reachable 5432; then
  fresh=""
  if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    install postgresql DATABASE
    fresh=1
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ -n "$fresh" ]; then
    # Tests connect as postgres over TCP without a password, as on CI machines.
    hba=/etc/postgresql/$version/main/pg_hba.conf
    sed -i -E 's/^(local|host)(\s+\S+\s+\S+\s+(\S+\s+)?)(peer|md5|scram-sha-256)$/\1\2trust/' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true # it may run already
  [ -z "$fresh" ] || pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  wait_port 5432 PostgreSQL
  psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE test' >/dev/null
fi
