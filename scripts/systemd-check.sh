#!/usr/bin/env bash
# Boots a Debian bookworm container under systemd-nspawn with the idem
# binary and deploy/systemd/idem.service installed, and checks there that
# the unit starts (as a dynamic user, not root), reads the admin tokens
# file, root's and mode 600, as the systemd credential the unit's
# commented lines load (installed as a drop-in, uncommented), serves a
# request, reloads on SIGHUP (`systemctl reload`: the same process,
# "reload requested" in its log) and stops cleanly on SIGTERM (exit
# status 0, "shutting down").
# It prints one line per step and, at the end, the unit's journal.
#
# Needs root. apt-get installs systemd-container and debootstrap when
# missing. The container's root (a minimal bookworm with systemd and procps, about
# 240 MB from the machine's Debian mirror) is made once, in about 2 min,
# and cached in .cache/systemd-check/root (git-ignored; or
# $IDEM_SYSTEMD_CHECK_CACHE); later runs take about 20 s. The cached root
# is never written: the container runs on a throwaway overlay
# (--volatile=overlay), and it has only a loopback network
# (--private-network). `make systemd-check` runs this; it is not part of
# scripts/test.sh because the first run takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "systemd-check: $*"; }
fail() { echo "systemd-check: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (systemd-nspawn and debootstrap)"
cache=${IDEM_SYSTEMD_CHECK_CACHE:-$PWD/.cache/systemd-check}
root=$cache/root
work=$cache/work

missing=""
command -v systemd-nspawn >/dev/null || missing="$missing systemd-container"
command -v debootstrap >/dev/null || missing="$missing debootstrap"
if [ -n "$missing" ]; then
  say "apt-get install$missing (once)"
  apt-get update -qq
  # shellcheck disable=SC2086 # several packages
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# procps brings /bin/kill (ExecReload), as on every standard Debian install.
packages=systemd,systemd-sysv,dbus,procps
if [ "$(cat "$root/.idem-packages" 2>/dev/null)" != "$packages" ]; then
  # The Debian mirror this machine's apt uses: a one-line "deb URL ..." or a
  # deb822 "URIs: URL", whose path ends in /debian (not debian-security).
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    sed -n -E 's,^(deb|URIs:)[[:space:]]+(\[[^]]*\][[:space:]]+)?(https?://[^[:space:]]+/debian/?)([[:space:]].*)?$,\3,p' | head -n 1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  say "debootstrap: a minimal Debian bookworm with systemd from $mirror into $root (about 2 min, once)"
  rm -rf "$root.tmp" "$root"
  mkdir -p "$cache"
  debootstrap --variant=minbase --include="$packages" bookworm "$root.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    fail "debootstrap failed; its log: $cache/debootstrap.log"
  echo "$packages" >"$root.tmp/.idem-packages"
  mv "$root.tmp" "$root"
else
  say "container root: cached in $root"
fi

rm -rf "$work"
mkdir -p "$work"
say "go build ./cmd/idem (static)"
CGO_ENABLED=0 go build -o "$work/idem" ./cmd/idem

# The unit's configuration in the container: the memory store, and an
# upstream that does not listen (a request through the gateway gets 502,
# which shows the proxy path works inside the sandbox).
cat >"$work/idem.env" <<'EOF'
IDEM_UPSTREAM=http://127.0.0.1:18081
IDEM_LISTEN=127.0.0.1:18080
IDEM_ADMIN=127.0.0.1:19090
IDEM_STORE=memory
IDEM_LOG_FORMAT=text
IDEM_SHUTDOWN_TIMEOUT=30s
EOF

# The admin tokens file, root's and mode 600 as docs/admin.md says,
# and the drop-in that loads it: the unit's own commented lines for it,
# uncommented.
printf 'check read-only check-s3cret-token\n' >"$work/admin-tokens"
chmod 600 "$work/admin-tokens"
{
  echo "[Service]"
  sed -n -E 's/^#((LoadCredential=admin-tokens:|Environment=IDEM_ADMIN_TOKENS_FILE=).*)$/\1/p' deploy/systemd/idem.service
} >"$work/credentials.conf"
grep -q '^LoadCredential=admin-tokens:' "$work/credentials.conf" || fail "deploy/systemd/idem.service has no commented LoadCredential=admin-tokens line"

# The check, run inside the container once it has booted. It ends the
# container with `systemctl exit`: 0 when every step passed.
cat >"$work/idem-check" <<'EOF'
#!/bin/bash
set -uo pipefail
say() { echo "systemd-check: [container] $*"; }
finish() {
  say "journal of idem.service:"
  journalctl -u idem.service -o short-monotonic --no-pager | sed 's/^/    /'
  say "$1"
  systemctl exit "$2"
  exit 0
}
failed() { finish "FAIL: $*" 1; }
# http METHOD HOST:PORT PATH [TOKEN]: the status code of one request, in
# 5 s at most, with Authorization: Bearer TOKEN (check-s3cret-token by default).
http() {
  timeout 5 bash -c '
    exec 3<>"/dev/tcp/${2%:*}/${2#*:}" || exit 1
    printf "%s %s HTTP/1.1\r\nHost: 127.0.0.1:${2#*:}\r\nConnection: close\r\nIdempotency-Key: systemd-check\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}" "$1" "$3" "${4:-check-s3cret-token}" >&3
    read -r _ code _ <&3 && echo "$code"' _ "$@" 2>/dev/null
}
prop() { systemctl show -p "$1" --value idem.service; }

say "booted: systemd $(systemctl --version | head -n 1 | cut -d' ' -f2), multi-user.target $(systemctl is-active multi-user.target)"
systemctl start idem.service || failed "systemctl start idem"
for _ in $(seq 1 100); do
  [ "$(http GET 127.0.0.1:19090 /healthz)" = 200 ] && break
  sleep 0.1
done
[ "$(http GET 127.0.0.1:19090 /healthz)" = 200 ] || failed "/healthz did not answer 200 after the start"
pid=$(prop MainPID)
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
say "started: active=$(prop ActiveState), pid $pid, uid $uid ($(prop User)), /healthz 200"
[ "$uid" != 0 ] || failed "idem runs as root: DynamicUser did not apply"
[ "$(http GET 127.0.0.1:19090 /readyz)" = 200 ] || failed "/readyz is not 200"
perms=$(stat -c '%U %a' /etc/idem/admin-tokens)
[ "$perms" = "root 600" ] || failed "/etc/idem/admin-tokens is $perms; want root 600"
[ "$(http GET 127.0.0.1:19090 /v1/stats check-s3cret-token)" = 200 ] || failed "the tokens file's token got no 200 from /v1/stats: the credential was not read"
[ "$(http GET 127.0.0.1:19090 /v1/stats wrong)" = 401 ] || failed "a wrong token got no 401 from /v1/stats"
say "the admin tokens file (root, 600) read as a credential by uid $uid: its token 200, another 401"
code=$(http POST 127.0.0.1:18080 /charges)
[ "$code" = 502 ] || failed "a POST through the gateway got $code; want 502 (the upstream does not listen)"
say "a POST through the gateway: 502 upstream_unreachable, as expected with no upstream"

systemctl reload idem.service || failed "systemctl reload idem"
for _ in $(seq 1 50); do
  journalctl -u idem.service -o cat --no-pager | grep -q "reload requested" && break
  sleep 0.1
done
journalctl -u idem.service -o cat --no-pager | grep -q "reload requested" || failed "no \"reload requested\" in the journal after the reload"
[ "$(prop MainPID)" = "$pid" ] || failed "the reload changed the main process: $pid, now $(prop MainPID)"
[ "$(http GET 127.0.0.1:19090 /healthz)" = 200 ] || failed "/healthz is not 200 after the reload"
say "reloaded: the same pid $pid, still $(prop ActiveState), \"reload requested\" logged, /healthz 200"

systemctl stop idem.service || failed "systemctl stop idem"
result=$(prop Result) status=$(prop ExecMainStatus)
say "stopped: Result=$result, exit status $status, $(prop ActiveState)"
[ "$result" = success ] && [ "$status" = 0 ] || failed "idem did not stop cleanly"
journalctl -u idem.service -o cat --no-pager | grep -q "shutting down" || failed "no \"shutting down\" in the journal"
finish "PASS: started, reloaded and stopped cleanly" 0
EOF
chmod +x "$work/idem-check"

cat >"$work/idem-check.service" <<'EOF'
[Unit]
Description=idem systemd-check: start, reload and stop idem.service
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/idem-check
StandardOutput=journal+console
StandardError=journal+console
EOF

say "booting the container (systemd-nspawn -b); its console is in $work/console.log"
status=0
timeout 300 systemd-nspawn --quiet --boot --directory="$root" --register=no --keep-unit \
  --private-network --volatile=overlay \
  --bind-ro="$work/idem:/usr/local/bin/idem" \
  --bind-ro="$PWD/deploy/systemd/idem.service:/etc/systemd/system/idem.service" \
  --bind-ro="$work/idem.env:/etc/idem/idem.env" \
  --bind-ro="$work/admin-tokens:/etc/idem/admin-tokens" \
  --bind-ro="$work/credentials.conf:/etc/systemd/system/idem.service.d/credentials.conf" \
  --bind-ro="$work/idem-check:/usr/local/sbin/idem-check" \
  --bind-ro="$work/idem-check.service:/etc/systemd/system/idem-check.service" \
  -- systemd.wants=idem-check.service >"$work/console.log" 2>&1 </dev/null || status=$?
# The check's own lines (and the journal it printed), without the boot's.
sed -E 's/\x1b\[[0-9;]*m//g' "$work/console.log" | sed -n -E 's/^idem-check\[[0-9]+\]: //p'
case $status in
0) say "PASS" ;;
124) fail "the container did not finish in 300 s; its console: $work/console.log" ;;
*) fail "the container exited $status; its console: $work/console.log" ;;
esac
