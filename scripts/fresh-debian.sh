#!/usr/bin/env bash
# Runs the README's two commands ("The two commands") on a fresh Debian
# machine with only Go, as a new user would: the check that they work as
# written there, without anything this machine has installed (issue 31
# item 14). It prints one line per step, the commands' own output, and
# at the end the time of each step.
#
# The fresh machine is a minimal Debian bookworm (debootstrap
# --variant=minbase) with the host's Go toolchain (/usr/local/go, on PATH
# as Go's install guide says), /etc/resolv.conf and CA certificates
# (below), and nothing else of the host's: no module cache, no build
# cache, no git, no gcc; a clean clone of REF (default HEAD) in
# /root/idem. It runs as root in a chroot with its own mount, PID, UTS,
# IPC and network namespaces (unshare): the host's Redis, PostgreSQL and
# NATS on 127.0.0.1 are not visible (checked before the commands run), so
# scripts/services.sh must install and start the root's own. The network
# reaches the internet (apt-get, the Go module proxy) through slirp4netns,
# in user space: no iptables, no route or interface on the host, and the
# host's loopback is not reachable from inside. There is no init: the
# packages' services are not started by apt-get, services.sh starts them.
# They die with the PID namespace when the run ends; nothing on the host
# is stopped or changed.
#
# In the root, in the README's order:
# 1. `go run ./cmd/idem serve --upstream http://127.0.0.1:3000`, in the
#    background, with only Go on the machine: it must answer /healthz on
#    127.0.0.1:9090 and an HTTP request on 127.0.0.1:8080 (502: no
#    upstream listens), then exit 0 on SIGTERM;
# 2. `scripts/test.sh`, which installs what it calls.
#
#   sudo scripts/fresh-debian.sh [--root DIR] [--reuse-root] [REF]
#
# DIR (default /var/tmp/idem-fresh-debian) holds base/, the debootstrap
# (about 3 min, 210 MB, from the machine's Debian mirror), and run/, this
# run's machine: a copy of base/ with Go and the clone, about 5 GB once
# the servers, Chromium and the caches are in, left in place for a look
# afterwards (logs in run/root/root/*.log) and replaced by the next run.
# base/ is made anew unless --reuse-root says to keep it; it is never
# written by a run, so every run starts from the same fresh machine.
# Needs root; apt-get installs debootstrap and slirp4netns when missing.
# The exit status is scripts/test.sh's, or 1 when it passed but the first
# command did not. `make fresh-debian` runs it on HEAD. It is not part of
# scripts/test.sh: on 2 busy cores (load average about 14) it took 58 min
# on 2026-12-05, 11 of them for the first command's downloads and compile.
set -euo pipefail

say() { echo "fresh-debian: $*"; }
fail() { echo "fresh-debian: FAIL: $*" >&2; exit 1; }
took() { printf '%dm %02ds' $(($1 / 60)) $(($1 % 60)); }

# The second stage, run by unshare in the new namespaces (still on the
# host's file system, in a private mount namespace): wait for the network,
# mount what a booted machine has, then chroot into the root and run the
# steps there. This shell is PID 1 of the namespace: when it ends, the
# kernel kills every process left in it (redis-server, postgres, nats-server).
if [ "${1:-}" = __inside ]; then
  root=$2 ready=$3 path=$4 up=""
  IFS= read -r -n 1 up <"$ready" || true
  [ "$up" = 1 ] || fail "slirp4netns did not bring the network up"
  hostname fresh-debian
  mount -t proc proc "$root/proc"
  # The kernel's settings are shared with the host: read-only, so that no
  # package's postinst (procps runs sysctl) changes the host's.
  mount --bind "$root/proc/sys" "$root/proc/sys"
  mount -o remount,bind,ro "$root/proc/sys"
  mount -t sysfs -o ro sysfs "$root/sys"
  mount -t tmpfs -o mode=755 tmpfs "$root/dev"
  for node in null zero full random urandom tty; do
    touch "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
  done
  mkdir "$root/dev/pts" "$root/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$root/dev/pts"
  ln -s pts/ptmx "$root/dev/ptmx"
  ln -s /proc/self/fd "$root/dev/fd"
  ln -s /proc/self/fd/0 "$root/dev/stdin"
  ln -s /proc/self/fd/1 "$root/dev/stdout"
  ln -s /proc/self/fd/2 "$root/dev/stderr"
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
  mount -t tmpfs -o mode=755 tmpfs "$root/run"
  # A root login's environment on a fresh machine, none of the host's
  # (GOFLAGS, GOTOOLCHAIN, proxies).
  status=0
  chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
    TERM="${TERM:-dumb}" PATH="$path" /bin/bash /root/fresh-debian-steps.sh </dev/null || status=$?
  exit "$status"
fi

usage="usage: sudo scripts/fresh-debian.sh [--root DIR] [--reuse-root] [REF]"
dir=/var/tmp/idem-fresh-debian reuse="" ref=HEAD
while [ $# -gt 0 ]; do
  case $1 in
  --root) [ $# -ge 2 ] || fail "--root needs a directory; $usage"; dir=$2; shift 2 ;;
  --reuse-root) reuse=1; shift ;;
  -h | --help) echo "$usage"; exit 0 ;;
  -*) fail "unknown flag $1; $usage" ;;
  *) ref=$1; shift ;;
  esac
done
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, namespaces); $usage"
script=$(realpath "$0")
repo=$(git -C "$(dirname "$script")/.." rev-parse --show-toplevel)
sha=$(git -C "$repo" rev-parse --verify --quiet "$ref^{commit}") || fail "$ref is not a commit of $repo"
goroot=/usr/local/go
[ -x "$goroot/bin/go" ] || fail "no Go toolchain in $goroot (the one the fresh machine gets)"
mkdir -p "$dir"
dir=$(realpath "$dir")
base=$dir/base run=$dir/run
root=$run/root

missing=""
command -v debootstrap >/dev/null || missing="$missing debootstrap"
command -v slirp4netns >/dev/null || missing="$missing slirp4netns"
if [ -n "$missing" ]; then
  say "apt-get install$missing (once)"
  apt-get update -qq
  # shellcheck disable=SC2086 # several packages
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The Debian mirror this machine's apt uses (as scripts/systemd-check.sh
# finds it): a one-line "deb URL ..." or a deb822 "URIs: URL" ending in /debian.
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
  sed -n -E 's,^(deb|URIs:)[[:space:]]+(\[[^]]*\][[:space:]]+)?(https?://[^[:space:]]+/debian/?)([[:space:]].*)?$,\3,p' | head -n 1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

start=$SECONDS
if [ -n "$reuse" ] && [ -f "$base/.idem-fresh-debian" ]; then
  say "debootstrap: reusing $base (made $(cat "$base/.idem-fresh-debian"))"
  debootstrap_took=reused
else
  say "debootstrap --variant=minbase bookworm from $mirror into $base (about 3 min; log in $dir/debootstrap.log)"
  rm -rf "$base.tmp" "$base"
  debootstrap --variant=minbase bookworm "$base.tmp" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
    fail "debootstrap failed; its log: $dir/debootstrap.log"
  date -u +%FT%TZ >"$base.tmp/.idem-fresh-debian"
  mv "$base.tmp" "$base"
  debootstrap_took=$(took $((SECONDS - start)))
fi

t=$SECONDS
say "the machine: a copy of $base in $root, with $goroot and /etc/resolv.conf"
rm -rf "$run"
mkdir -p "$run"
cp -a "$base" "$root"
rm "$root/.idem-fresh-debian"
mkdir -p "$root/usr/local"
cp -a "$goroot" "$root/usr/local/go"
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin
# shellcheck disable=SC2016 # expanded by the root's login shell
echo 'export PATH=$PATH:/usr/local/go/bin' >"$root/etc/profile.d/go.sh"
# A nameserver on the host's loopback is not reachable from inside:
# slirp4netns's own (10.0.2.3) forwards to the host's resolver instead.
if grep -q -E '^nameserver[[:space:]]+(127\.|::1)' /etc/resolv.conf; then
  echo "nameserver 10.0.2.3" >"$root/etc/resolv.conf"
else
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
fi
# The TLS trust of the host, which a minbase root lacks (no
# ca-certificates): on a Debian machine it is Debian's CA certificates; on
# one whose egress goes through a TLS proxy it has that proxy's CA too,
# without which the Go module proxy cannot be reached. In
# /usr/local/share/ca-certificates as well, so that it stays when an
# apt-get install brings ca-certificates and rebuilds the bundle.
mkdir -p "$root/etc/ssl/certs" "$root/usr/local/share/ca-certificates"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/fresh-debian-host.crt"
echo fresh-debian >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tfresh-debian\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# The apt sources of a Debian installed from its installer: the release,
# its updates and the security archive.
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
  "$mirror" "$mirror" >"$root/etc/apt/sources.list"
say "git clone of $ref ($sha) into /root/idem"
git clone --quiet --no-checkout "$repo" "$root/root/idem"
git -C "$root/root/idem" checkout --quiet --detach "$sha"
copy_took=$(took $((SECONDS - t)))

# The steps, run in the root as root. Each writes its figures to
# /root/fresh-debian.times, which the host prints at the end.
cat >"$root/root/fresh-debian-steps.sh" <<'EOF'
#!/bin/bash
set -uo pipefail
say() { echo "fresh-debian: [root] $*"; }
took() { printf '%dm %02ds' $(($1 / 60)) $(($1 % 60)); }
times=/root/fresh-debian.times
reachable() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
# http PORT PATH: the status code of a GET, in 5 s at most.
http() {
  timeout 5 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" "$2" >&3
    read -r _ code _ <&3 && echo "$code"' _ "$@" 2>/dev/null
}
cd /root/idem

for port in 6379 5432 4222 8080 9090; do
  if reachable "$port"; then
    say "FAIL: something answers on 127.0.0.1:$port before anything was installed: not a fresh machine"
    exit 2
  fi
done
say "$(go version); $(. /etc/os-release && echo "$PRETTY_NAME"); nothing on 127.0.0.1:6379, 5432, 4222, 8080, 9090;" \
  "no gcc: $(command -v gcc >/dev/null && echo NO || echo yes), no git: $(command -v git >/dev/null && echo NO || echo yes)"

# The first command, with only Go on the machine. go run starts the binary
# it built as its child; SIGTERM goes to that child, as a service manager
# would send it, and go run exits with its status.
say "go run ./cmd/idem serve --upstream http://127.0.0.1:3000 (in the background; downloads the modules and compiles first)"
serve=1
t=$SECONDS
go run ./cmd/idem serve --upstream http://127.0.0.1:3000 >/root/serve.log 2>&1 &
gorun=$!
healthz=""
while kill -0 "$gorun" 2>/dev/null && [ $((SECONDS - t)) -lt 1800 ]; do
  healthz=$(http 9090 /healthz) && [ "$healthz" = 200 ] && break
  sleep 1
done
echo "serve_up='$(took $((SECONDS - t)))'" >>$times
if [ "$healthz" != 200 ]; then
  say "FAIL: no 200 from 127.0.0.1:9090/healthz after $(took $((SECONDS - t))); serve's log:"
  sed 's/^/    /' /root/serve.log
  kill -KILL "$gorun" 2>/dev/null
else
  gateway=$(http 8080 /) || gateway=none
  say "answering after $(took $((SECONDS - t))): 127.0.0.1:9090/healthz $healthz, GET 127.0.0.1:8080/ $gateway (502 expected: nothing listens on 3000)"
  idem=""
  for stat in /proc/[0-9]*/stat; do
    read -r pid comm _ ppid _ <"$stat" 2>/dev/null || continue
    [ "$ppid" = "$gorun" ] && [ "$comm" = "(idem)" ] && idem=$pid
  done
  if [ -z "$idem" ]; then
    say "FAIL: no idem process under go run ($gorun)"
    kill -KILL "$gorun"
  else
    t=$SECONDS
    kill -TERM "$idem"
    for _ in $(seq 1 600); do kill -0 "$gorun" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$gorun" 2>/dev/null; then
      say "FAIL: still running 60 s after SIGTERM"
      kill -KILL "$idem" "$gorun"
    fi
    wait "$gorun"
    status=$?
    echo "serve_stop='$(took $((SECONDS - t)))'" >>$times
    say "SIGTERM to idem (pid $idem): go run exited $status after $(took $((SECONDS - t))); serve's last lines:"
    tail -n 3 /root/serve.log | sed 's/^/    /'
    [ "$status" = 0 ] && [ "$gateway" != none ] && serve=0
  fi
fi
wait "$gorun" 2>/dev/null
echo "serve_ok=$([ $serve = 0 ] && echo yes || echo no)" >>$times

say "scripts/test.sh (its output also in /root/test.log)"
t=$SECONDS
scripts/test.sh 2>&1 | tee /root/test.log
status=${PIPESTATUS[0]}
echo "test_took='$(took $((SECONDS - t)))' test_secs=$((SECONDS - t))" >>$times
echo "test_status=$status" >>$times
[ "$status" != 0 ] && exit "$status"
exit $serve
EOF

# The namespaces: unshare makes them and forks the second stage (above) as
# PID 1 of the new PID namespace; --kill-child kills it, and so the whole
# namespace, if unshare itself is killed. unshare's own process is in the
# new network namespace, which slirp4netns joins by its pid; the second
# stage waits on a fifo until slirp4netns says the network is up.
ready=$run/ready
mkfifo "$ready"
say "unshare: mount, PID, UTS, IPC and network namespaces; chroot $root"
unshare --mount --pid --uts --ipc --net --fork --kill-child -- \
  "$BASH" "$script" __inside "$root" "$ready" "$path" &
inside=$!
# Ends only what this script started, by pid, if the script is
# interrupted: unshare, with SIGKILL (it ignores SIGTERM and SIGINT while
# its child runs; its --kill-child then kills the namespace's PID 1, and
# the kernel every process in it), and slirp4netns.
slirp=""
trap 'kill -KILL "$inside" 2>/dev/null; kill $slirp 2>/dev/null; true' EXIT
trap 'exit 130' INT TERM
# slirp4netns must join the new network namespace, never the host's: wait
# until unshare's process is in it.
for _ in $(seq 1 100); do
  [ "$(readlink "/proc/$inside/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] && break
  sleep 0.05
done
[ "$(readlink "/proc/$inside/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] ||
  fail "unshare did not make its network namespace"
slirp4netns --configure --mtu=65520 --disable-host-loopback --ready-fd=3 \
  "$inside" tap0 3>"$ready" >"$run/slirp4netns.log" 2>&1 &
slirp=$!
status=0
wait "$inside" || status=$?
kill "$slirp" 2>/dev/null || true
wait "$slirp" 2>/dev/null || true
trap - EXIT INT TERM

# The figures the steps wrote.
serve_up=none serve_stop=none serve_ok=no test_took=none test_secs=0 test_status=none
if [ -f "$root/root/fresh-debian.times" ]; then
  # shellcheck disable=SC1091 # written by the steps above
  . "$root/root/fresh-debian.times"
fi
echo
say "the figures (logs: $root/root/serve.log, $root/root/test.log)"
echo "  commit                      $sha ($ref)"
echo "  debootstrap                 $debootstrap_took"
echo "  copy of the root, Go, clone $copy_took"
echo "  go run ... serve answering  $serve_up (only Go on the machine: modules and compile included)"
echo "  serve stop on SIGTERM       $serve_stop; first command $([ "$serve_ok" = yes ] && echo passed || echo FAILED)"
if [ -f "$root/root/test.log" ]; then
  # test.sh's phase lines carry their start in seconds: a phase lasts
  # until the next one starts (the last one until test.sh ended). The
  # first is scripts/services.sh, with its apt-get installs.
  sed -n -E 's/^test\.sh: \[([0-9]+)s\] (.*)$/\1 \2/p' "$root/root/test.log" |
    awk -v end="$test_secs" '
      { start[NR] = $1; $1 = ""; name[NR] = substr($0, 2, 64) }
      END {
        name[1] = "scripts/services.sh (installs and starts the servers)"
        for (i = 1; i <= NR; i++) {
          if (name[i] == "every test passed") continue
          stop = i < NR ? start[i + 1] : end
          printf "  test.sh %2dm %02ds  %s\n", (stop - start[i]) / 60, (stop - start[i]) % 60, name[i]
        }
      }'
fi
echo "  scripts/test.sh             $test_took, exit status $test_status"
echo "  in all                      $(took $((SECONDS - start)))"
if [ "$status" = 0 ]; then
  say "PASS: the README's two commands work on a fresh Debian with only Go"
else
  say "FAIL: exit status $status"
fi
exit "$status"
