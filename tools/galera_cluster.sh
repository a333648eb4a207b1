#!/usr/bin/env bash
# A 3-node MariaDB Galera 4 cluster on loopback, for tests and benches of the worker's fail-over
# (docs/testing.md, "Test clusters"). Needs mariadb-server, galera-4 and mariadb-backup
# (tools/dev_env.sh installs them).
#
#   tools/galera_cluster.sh start  DIR [--base-port N]   3 nodes, waits until all are Synced
#   tools/galera_cluster.sh status DIR                   cluster size and state of every node
#   tools/galera_cluster.sh stop   DIR                   SIGTERM (then SIGKILL) the PIDs in DIR
#
# Ports, from the base port N (default 23306), node i = 1..3 at offset o = 10 * (i - 1):
#   N+o   SQL (127.0.0.1)     N+o+1 Galera replication     N+o+2 IST     N+o+3 SST
# so the default layout is 23306/23316/23326 for SQL. Fixed layouts stay below 32768: above it,
# the kernel hands out ephemeral client ports, and a client socket may already hold one.
#
# Every node has its own directory DIR/nodeI (data, my.cnf, socket, error.log, pid file).
# `start` wipes node directories left by an earlier stopped run of this script and refuses while
# one of its nodes still runs. `stop` kills exactly the PIDs written under DIR, never by name,
# and keeps the directories (the logs) for a post-mortem.
#
# The servers run as the invoking user with --user=root when that is root: DIR is usually a
# root-only temporary directory that the mysql account could not even enter, and an SST runs
# mariadb-backup as the server's user, which then needs no extra ownership fix either.
set -euo pipefail

script_name=galera_cluster
default_base_port=23306
# shellcheck source=tools/cluster_lib.sh
. "$(dirname "$0")/cluster_lib.sh"

node_label() { echo "node$1"; }
sql_port() { node_port "$1"; }
galera_port() { echo $(($(sql_port "$1") + 1)); }
ist_port() { echo $(($(sql_port "$1") + 2)); }
sst_port() { echo $(($(sql_port "$1") + 3)); }

live_pid() {
  pid_of "$(node_dir "$1")/pid" cmdline "--defaults-file=$(node_dir "$1")/my.cnf"
}

# One statement as root over the node's own socket; prints the tab-separated result.
sql() {
  mariadb --no-defaults -uroot --socket="$(node_dir "$1")/mysqld.sock" -N -B -e "$2" 2>/dev/null
}

wsrep_status() {
  sql "$1" "SHOW GLOBAL STATUS WHERE Variable_name IN
    ('wsrep_cluster_size', 'wsrep_local_state_comment', 'wsrep_cluster_status')" |
    awk '{ v[$1] = $2 } END { printf "size=%s state=%s status=%s\n",
      v["wsrep_cluster_size"], v["wsrep_local_state_comment"], v["wsrep_cluster_status"] }'
}

write_config() {
  local n=$1 d members="" m
  d=$(node_dir "$n")
  for m in "${nodes[@]}"; do members="${members:+$members,}127.0.0.1:$(galera_port "$m")"; done
  # Temporary tables in the node's own directory, not the shared /tmp (see tests/helpers/mariadbd.ts).
  mkdir -p "$d/tmp"
  cat >"$d/my.cnf" <<EOF
[mysqld]
datadir=$d/data
tmpdir=$d/tmp
socket=$d/mysqld.sock
pid-file=$d/mysqld.pid
log-error=$d/error.log
port=$(sql_port "$n")
bind-address=127.0.0.1
$( [ "$(id -u)" -eq 0 ] && echo "user=root" )
character-set-server=utf8mb4
collation-server=utf8mb4_general_ci
max-connections=200
# Small and few fsyncs: three servers share a loaded test machine.
innodb-buffer-pool-size=64M
innodb-log-file-size=8M
innodb-flush-log-at-trx-commit=2
# What Galera needs: row events, no table-level auto-increment lock.
binlog_format=ROW
default-storage-engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=/usr/lib/galera/libgalera_smm.so
wsrep_cluster_name=se_test_galera
wsrep_cluster_address=gcomm://$members
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$(galera_port "$n")
wsrep_provider_options="base_port=$(galera_port "$n");ist.recv_addr=127.0.0.1:$(ist_port "$n");gcache.size=32M"
# rsync state transfer fails in the sandbox this was built in; mariadb-backup streams over socat.
wsrep_sst_method=mariabackup
wsrep_sst_auth=sst:se-sst-pw
wsrep_sst_receive_address=127.0.0.1:$(sst_port "$n")
EOF
}

launch() {
  local n=$1 d
  d=$(node_dir "$n")
  shift
  # Its own session and no inherited descriptors: the server outlives this script, and a caller
  # reading our output (a test) sees it end when we exit.
  setsid /usr/sbin/mariadbd --defaults-file="$d/my.cnf" "$@" </dev/null >>"$d/stdout.log" 2>&1 &
  echo $! >"$d/pid"
}

# Wait until node n is Synced in a cluster of `want` nodes; fails when the server exits.
wait_synced() {
  local n=$1 want=$2 timeout=${3:-180} status
  for _ in $(seq 1 $((timeout * 2))); do
    if ! live_pid "$n" >/dev/null; then
      log "node$n exited while starting; its log ($(node_dir "$n")/error.log) ends with:"
      tail -n 30 "$(node_dir "$n")/error.log" >&2 || true
      return 1
    fi
    status=$(wsrep_status "$n" || true)
    case "$status" in "size=$want state=Synced status=Primary") return 0 ;; esac
    sleep 0.5
  done
  log "node$n not Synced in a cluster of $want after ${timeout}s (last: ${status:-no answer})"
  return 1
}

start() {
  local n bin
  for bin in /usr/sbin/mariadbd mariadb-install-db mariadb-backup mbstream socat; do
    command -v "$bin" >/dev/null ||
      { log "$bin is missing (tools/dev_env.sh installs galera-4 and mariadb-backup)"; exit 1; }
  done
  [ -f /usr/lib/galera/libgalera_smm.so ] || { log "galera-4 is not installed"; exit 1; }
  begin_start
  for n in "${nodes[@]}"; do
    rm -rf "$(node_dir "$n")"
    write_config "$n"
    mariadb-install-db --defaults-file="$(node_dir "$n")/my.cnf" --auth-root-authentication-method=normal \
      --skip-test-db >"$(node_dir "$n")/install.log" 2>&1 ||
      { log "mariadb-install-db failed for node$n:"; tail -n 20 "$(node_dir "$n")/install.log" >&2; exit 1; }
  done
  launch 1 --wsrep-new-cluster
  wait_synced 1 1
  # The account the donor's mariadb-backup uses; replicated to the joiners with their SST.
  sql 1 "CREATE USER 'sst'@'localhost' IDENTIFIED BY 'se-sst-pw';
    GRANT RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR ON *.* TO 'sst'@'localhost'"
  # One joiner at a time: a donor serves one state transfer at once.
  launch 2
  wait_synced 2 2
  launch 3
  wait_synced 3 3
  for n in "${nodes[@]}"; do wait_synced "$n" 3 30; done
  for n in "${nodes[@]}"; do
    echo "node$n port=$(sql_port "$n") galera=$(galera_port "$n") pid=$(live_pid "$n")"
  done
}

status() {
  local n pid rc=0
  for n in "${nodes[@]}"; do
    if pid=$(live_pid "$n"); then
      echo "node$n port=$(sql_port "$n") pid=$pid $(wsrep_status "$n" || echo "no answer")"
    else
      echo "node$n port=$(sql_port "$n") down"
      rc=1
    fi
  done
  return $rc
}

cluster_main "$@"
