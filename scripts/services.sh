#!/usr/bin/env bash
# Makes sure the Redis, PostgreSQL and NATS servers that the tests talk to are up,
# and says so in one line per step:
# - a server that answers on its port (or one named by IDEM_TEST_REDIS_URL
#   or IDEM_TEST_DATABASE_URL) is left alone;
# - one that is installed but down is started: Redis on 127.0.0.1:6379
#   without persistence, PostgreSQL's newest cluster;
# - on a fresh Debian machine, as root, apt-get installs what is missing
#   (gcc, redis-server, postgresql, nats-server, prometheus for its
#   promtool, systemd for systemd-analyze, chromium for the console's
#   browser test, spin for make model, make for the Makefile, git for the
#   image's revision; about a minute), and the new
#   PostgreSQL's local pg_hba.conf lines are set to trust, so that the tests
#   connect as postgres without a password.
# - NATS (examples/natsconsumer) runs with JetStream on 127.0.0.1:4222,
#   unless IDEM_TEST_NATS_URL names one; a server there without JetStream
#   (the Debian package's own service) is an error, not left to skip the tests.
# The servers are left running afterwards.
set -euo pipefail

say() { echo "services: $*"; }
reachable() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
# A NATS server greets with an INFO line that has "jetstream":true when it runs with -js.
jetstream() {
  # shellcheck disable=SC2016 # $line is the inner shell's
  timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222 && IFS= read -r line <&3 && [[ $line == *\"jetstream\":true* ]]' 2>/dev/null
}

apt_updated=""
# install PACKAGES WHY [VAR [APT_FLAGS]]: apt-get install PACKAGES, as root only.
# VAR names the IDEM_TEST_VAR_URL that may point at a server instead.
install() {
  if [ "$(id -u)" != 0 ]; then
    echo "services: $1 is not installed and this is not root: install it${3:+, or set IDEM_TEST_${3}_URL}" >&2
    exit 1
  fi
  if [ -z "$apt_updated" ]; then
    say "apt-get update (the package index, once)"
    apt-get update -qq
    apt_updated=1
  fi
  say "apt-get install $1 ($2; apt-get is quiet, the installs take about a minute in all)"
  # shellcheck disable=SC2086 # $1 may name several packages, $4 several flags
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${4:-} $1 >/dev/null
}

wait_port() {
  for _ in $(seq 1 50); do reachable "$1" && return 0; sleep 0.2; done
  echo "services: $2 did not come up on 127.0.0.1:$1" >&2
  exit 1
}

# go test -race needs cgo, and the breach lab compiles a small clock shim.
command -v cc >/dev/null || install "gcc libc6-dev" "a C compiler: go test -race needs cgo" CC

# promtool checks and tests the alert rules (deploy/prometheus). Debian ships
# it in prometheus, whose server is not wanted: it would hold 127.0.0.1:9090,
# idem's admin port. Without its recommends (node-exporter), and stopped if
# the package started it.
if ! command -v promtool >/dev/null; then
  install prometheus "promtool, for the tests of the alert rules" "" --no-install-recommends
  if [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/prometheus ]; then
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
  say "promtool: installed (the prometheus server it came with is stopped and disabled)"
fi
# systemd-analyze checks deploy/systemd/idem.service (verify, security).
# On a machine without systemd as init the package only brings the tools.
command -v systemd-analyze >/dev/null || install systemd "systemd-analyze, for the checks of the systemd unit" "" --no-install-recommends
# Chromium runs the console's end-to-end test (internal/console/browsertest),
# headless; with its recommends, for the fonts of its screenshots.
command -v chromium >/dev/null || install chromium "Chromium, for the console's browser test"
# make runs the Makefile's targets (make help), which the docs name; the
# test command calls the scripts themselves and does not need it.
command -v make >/dev/null || install make "make, for the Makefile's targets (make help)"
# git: the image's test (deploy/image) labels the image with the clone's
# revision, as make image does.
command -v git >/dev/null || install git "git, for the revision the OCI image's label carries" "" --no-install-recommends
# spin checks the protocol's model (make model, model/idem.pml).
command -v spin >/dev/null || install spin "spin, the Promela model checker, for make model"

if [ -n "${IDEM_TEST_REDIS_URL:-}" ]; then
  say "Redis: IDEM_TEST_REDIS_URL names it, left alone"
elif reachable 6379; then
  say "Redis: up on 127.0.0.1:6379"
else
  # redis-server also brings redis-cli, which the cluster tests use.
  command -v redis-server >/dev/null || install redis-server "Redis, with redis-cli" REDIS
  if ! reachable 6379; then # the package may have started it already
    say "Redis: starting redis-server on 127.0.0.1:6379 without persistence (left running)"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
  fi
  wait_port 6379 Redis
  say "Redis: up on 127.0.0.1:6379"
fi

if [ -n "${IDEM_TEST_DATABASE_URL:-}" ]; then
  say "PostgreSQL: IDEM_TEST_DATABASE_URL names it, left alone"
elif reachable 5432; then
  say "PostgreSQL: up on 127.0.0.1:5432"
else
  fresh=""
  if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    install postgresql PostgreSQL DATABASE
    fresh=1
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ -n "$fresh" ]; then
    # Tests connect as postgres over TCP without a password, as on CI machines.
    hba=/etc/postgresql/$version/main/pg_hba.conf
    say "PostgreSQL: setting the local and loopback lines of $hba to trust"
    sed -i -E 's/^(local|host)(\s+\S+\s+\S+\s+(\S+\s+)?)(peer|md5|scram-sha-256)$/\1\2trust/' "$hba"
  fi
  say "PostgreSQL: starting cluster $version/main on 127.0.0.1:5432 (left running)"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true # it may run already
  [ -z "$fresh" ] || pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  wait_port 5432 PostgreSQL
  if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1; then
    say "PostgreSQL: creating the database test"
    psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE test' >/dev/null
  fi
  say "PostgreSQL: up on 127.0.0.1:5432"
fi

if [ -n "${IDEM_TEST_NATS_URL:-}" ]; then
  say "NATS: IDEM_TEST_NATS_URL names it, left alone"
elif reachable 4222; then
  # Without JetStream the natsconsumer tests would only skip (or fail under CI).
  if ! jetstream; then
    echo "services: the server on 127.0.0.1:4222 is not a NATS server with JetStream: restart it with -js" \
      "(the Debian package's own service runs without: systemctl disable --now nats-server, then run this again)," \
      "or set IDEM_TEST_NATS_URL" >&2
    exit 1
  fi
  say "NATS: up on 127.0.0.1:4222 with JetStream"
else
  if [ ! -x /usr/sbin/nats-server ]; then
    install nats-server "NATS with JetStream, for examples/natsconsumer" NATS
    # Under systemd the package enables and starts its own service, without
    # JetStream. Stopping it is not enough: enabled, it comes back at every
    # boot and holds the port. It may also not listen yet, so do not ask.
    if [ -d /run/systemd/system ]; then
      say "NATS: disabling and stopping the package's nats-server service (no JetStream) to start it with -js"
      systemctl disable --now nats-server >/dev/null 2>&1 || true
    fi
  fi
  if ! reachable 4222; then
    say "NATS: starting nats-server -js on 127.0.0.1:4222 (left running)"
    mkdir -p /var/lib/nats-server /var/log
    # The pidfile is the daemon's own: another nats-server (on another port) is not it.
    start-stop-daemon --start --oknodo --background --make-pidfile --pidfile /run/idem-nats-server.pid \
      --exec /usr/sbin/nats-server -- \
      -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  fi
  wait_port 4222 NATS
  jetstream || { echo "services: the NATS server on 127.0.0.1:4222 runs without JetStream" >&2; exit 1; }
  say "NATS: up on 127.0.0.1:4222 with JetStream"
fi
