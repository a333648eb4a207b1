# Sourced by tools/galera_cluster.sh and tools/rabbitmq_cluster.sh: what the two test-cluster
# scripts share (arguments, the port layout, finding a node's live PID, stop by PID, the failed
# start's clean-up and the command dispatch). Before sourcing, the script sets `script_name` and
# `default_base_port`; it then defines `node_label N`, `live_pid N`, `start` and `status`, and
# calls `cluster_main "$@"`.

nodes=(1 2 3)

log() { echo "$script_name: $*" >&2; }

usage() { echo "usage: $0 start|stop|status DIR [--base-port N]" >&2; exit 2; }

node_dir() { echo "$dir/node$1"; }

# Node i's first port: the base port plus 10 × (i − 1); its other ports follow it.
node_port() { echo $((base_port + 10 * ($1 - 1))); }

# The PID in `file` when that process runs and is the node's server: `needle` is one whole
# entry of /proc/PID/<proc_file> (cmdline or environ), so a reused PID of another process does
# not count; neither does a zombie that nobody reaped.
pid_of() {
  local file=$1 proc_file=$2 needle=$3 pid
  [ -s "$file" ] || return 1
  pid=$(tr -d '[:space:]' <"$file")
  [ -r "/proc/$pid/$proc_file" ] || return 1
  grep -q 'State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null && return 1
  tr '\0' '\n' <"/proc/$pid/$proc_file" | grep -qxF -- "$needle" || return 1
  echo "$pid"
}

# SIGTERM every node still running, wait up to 30 s for each, SIGKILL what is left.
stop_nodes() {
  local n pid entry pids=()
  for n in "${nodes[@]}"; do
    if pid=$(live_pid "$n"); then kill -TERM "$pid" 2>/dev/null || true; pids+=("$n:$pid"); fi
  done
  for entry in ${pids[@]+"${pids[@]}"}; do
    n=${entry%%:*}
    pid=${entry#*:}
    for _ in $(seq 1 60); do live_pid "$n" >/dev/null || break; sleep 0.5; done
    if live_pid "$n" >/dev/null; then
      log "$(node_label "$n") (pid $pid) ignored SIGTERM for 30 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "$(node_label "$n") stopped (pid $pid)"
  done
}

# The start's common first steps: refuse while a node of DIR runs, make DIR, remember the base
# port for stop and status, and from here on stop what this start launched if it fails.
begin_start() {
  local n
  for n in "${nodes[@]}"; do
    if live_pid "$n" >/dev/null; then log "$(node_label "$n") in $dir still runs: stop it first"; exit 1; fi
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  echo "$base_port" >"$dir/base_port"
  trap 'rc=$?; if [ $rc -ne 0 ]; then log "start failed: stopping its nodes"; stop_nodes >/dev/null; fi' EXIT
}

cluster_main() {
  [ $# -ge 2 ] || usage
  local command=$1
  dir=$2
  shift 2
  base_port=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --base-port) [ $# -ge 2 ] || usage; base_port=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  case "$base_port" in *[!0-9]*) usage ;; esac
  if [ -d "$dir" ]; then
    dir=$(cd "$dir" && pwd)
    # stop and status find the ports the cluster was started with.
    [ -n "$base_port" ] || [ ! -f "$dir/base_port" ] || base_port=$(cat "$dir/base_port")
  fi
  base_port=${base_port:-$default_base_port}
  case "$command" in
    start) start ;;
    stop) [ -d "$dir" ] || { log "no cluster directory $dir"; exit 1; }; stop_nodes ;;
    status) [ -d "$dir" ] || { log "no cluster directory $dir"; exit 1; }; status ;;
    *) usage ;;
  esac
}
