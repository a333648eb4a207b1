#!/usr/bin/env bash
# Idempotent set-up of a Debian machine (with npm) for running and testing
# statusengine-worker: installs the pinned Deno (.deno-version), gearmand, Prometheus and the
# perfdata backends' servers (influxd, victoria-metrics, carbon-cache with whisper-fetch; the
# tests start their own on free ports) and what the test clusters need (galera-4,
# mariadb-backup, socat: tools/galera_cluster.sh) when missing, starts MariaDB
# when it does not answer on 127.0.0.1:3306 and RabbitMQ when it does not
# answer on 127.0.0.1:5672, and with --gearmand also starts a job server on
# 127.0.0.1:4730 (the tests start their own on free ports) and fails when it does not answer.
set -euo pipefail

with_gearmand=0
for arg in "$@"; do
  case "$arg" in
    --gearmand) with_gearmand=1 ;;
    *) echo "usage: $0 [--gearmand]" >&2; exit 2 ;;
  esac
done

log() { echo "dev_env: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root for: $*"; return 1
  fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then as_root apt-get update -qq >/dev/null; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The one Deno version the worker is built and tested with: .deno-version (CI and the
# README read the same file).
deno_version=$(tr -d '[:space:]' <"$(dirname "$0")/../.deno-version")
installed_deno() { deno --version 2>/dev/null | sed -nE 's/^deno ([0-9.]+).*/\1/p'; }
if [ "$(installed_deno)" != "$deno_version" ]; then
  log "installing Deno $deno_version from npm (found: $(installed_deno || true))"
  npm install -g "deno@$deno_version" >/dev/null
  hash -r
  if [ "$(installed_deno)" != "$deno_version" ]; then
    log "Deno $deno_version was installed but \`deno\` on PATH is still $(installed_deno); put npm's bin directory first"
    exit 1
  fi
fi

if ! command -v gearmand >/dev/null 2>&1 && [ ! -x /usr/sbin/gearmand ]; then
  log "installing gearmand (gearman-job-server, gearman-tools)"
  apt_install gearman-job-server gearman-tools
fi

# promtool checks and unit-tests packaging/prometheus/alerts.yml; prometheus scrapes a real worker
# in the dashboard test. Debian's package ships both.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  log "installing Prometheus (prometheus, promtool)"
  apt_install prometheus
fi
# The packaging tests check the shipped snippets with the tools that read them: logrotate -d,
# systemd-analyze verify and systemd-sysusers --dry-run (systemd-notify sends the unit's readiness).
if ! command -v logrotate >/dev/null 2>&1; then
  log "installing logrotate"
  apt_install logrotate
fi
if ! command -v systemd-notify >/dev/null 2>&1 || ! command -v systemd-analyze >/dev/null 2>&1; then
  log "installing systemd (its tools; nothing is started)"
  apt_install systemd
fi
# The perfdata tests talk to the real servers (tests/helpers/tsdb.ts): InfluxDB 1.x, Prometheus
# 2.x (remote-write receiver), VictoriaMetrics and Graphite's carbon-cache, read back with
# whisper-fetch. Installed only, never started here.
perfdata_packages=()
command -v influxd >/dev/null 2>&1 || perfdata_packages+=(influxdb)
command -v prometheus >/dev/null 2>&1 || perfdata_packages+=(prometheus)
command -v victoria-metrics >/dev/null 2>&1 || perfdata_packages+=(victoria-metrics)
command -v carbon-cache >/dev/null 2>&1 || perfdata_packages+=(graphite-carbon)
command -v whisper-fetch >/dev/null 2>&1 || perfdata_packages+=(python3-whisper)
if [ "${#perfdata_packages[@]}" -gt 0 ]; then
  log "installing ${perfdata_packages[*]}"
  apt_install "${perfdata_packages[@]}"
  # Debian starts the packaged services on their default ports; the tests need none of them.
  for service in influxdb prometheus victoria-metrics carbon-cache; do
    as_root systemctl disable --now "$service" >/dev/null 2>&1 || true
  done
fi

# The cluster stage (deno task test:cluster) starts a 3-node Galera cluster with
# tools/galera_cluster.sh: the Galera 4 provider, and mariadb-backup for its state transfers.
# Installed only, never started here.
galera_packages=()
[ -f /usr/lib/galera/libgalera_smm.so ] || galera_packages+=(galera-4)
command -v mariadb-backup >/dev/null 2>&1 || galera_packages+=(mariadb-backup)
command -v socat >/dev/null 2>&1 || galera_packages+=(socat)
if [ "${#galera_packages[@]}" -gt 0 ]; then
  log "installing ${galera_packages[*]}"
  apt_install "${galera_packages[@]}"
fi

mysql_answers() {
  (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null
}

installed_mariadb=0
if ! mysql_answers; then
  if [ ! -x /usr/sbin/mariadbd ]; then
    log "installing MariaDB"
    apt_install mariadb-server
    installed_mariadb=1
  fi
  log "starting MariaDB"
  as_root mkdir -p /run/mysqld
  as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
  as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 60); do mysql_answers && break; sleep 0.5; done
  mysql_answers || { log "MariaDB does not answer on 127.0.0.1:3306"; exit 1; }
  if [ "$installed_mariadb" -eq 1 ]; then
    # Debian's root account only accepts the unix socket; the defaults (and the
    # tests) connect as root without a password over TCP on this dev machine.
    log "allowing root without a password over TCP (development machine)"
    as_root mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')"
  fi
fi

rabbitmq_answers() {
  (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null
}

if ! rabbitmq_answers; then
  if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
    log "installing RabbitMQ"
    apt_install rabbitmq-server
  fi
  log "starting RabbitMQ"
  as_root rabbitmq-server -detached >/dev/null 2>&1 || true
  as_root timeout 120 rabbitmqctl await_startup >/dev/null 2>&1 || true
  for _ in $(seq 1 120); do rabbitmq_answers && break; sleep 0.5; done
  rabbitmq_answers || { log "RabbitMQ does not answer on 127.0.0.1:5672"; exit 1; }
fi

# DEV_ENV_GEARMAND_PORT: another port for the job server (the tests of this script use free ones).
gearmand_port=${DEV_ENV_GEARMAND_PORT:-4730}
gearmand_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$gearmand_port") 2>/dev/null
}

if [ "$with_gearmand" -eq 1 ]; then
  if ! gearmand_answers; then
    log "starting gearmand on 127.0.0.1:$gearmand_port"
    piddir=$(mktemp -d)
    # Foreground process in the background: `gearmand -d` exits 0 even when the port is taken.
    nohup /usr/sbin/gearmand --listen=127.0.0.1 --port="$gearmand_port" --threads=1 \
      --log-file=stderr --pid-file="$piddir/gearmand.pid" >/dev/null 2>"$piddir/gearmand.log" &
    gearmand_pid=$!
    # One that cannot bind its port neither exits nor answers: it retries the bind.
    for _ in $(seq 1 200); do
      gearmand_answers && break
      kill -0 "$gearmand_pid" 2>/dev/null || break
      sleep 0.05
    done
    if ! gearmand_answers; then
      log "gearmand (pid $gearmand_pid) does not answer on 127.0.0.1:$gearmand_port (is the port taken?); its log, $piddir/gearmand.log:"
      cat "$piddir/gearmand.log" >&2 || true
      # Retrying its bind, gearmand ignores SIGTERM; left alone it would take the port once free.
      kill -KILL "$gearmand_pid" 2>/dev/null || true
      exit 1
    fi
    log "gearmand (pid $gearmand_pid) answers on 127.0.0.1:$gearmand_port; log $piddir/gearmand.log"
  fi
fi
log "ready"
