#!/usr/bin/env bash
# A 3-node RabbitMQ cluster on one host, for tests and benches of the worker's fail-over
# (docs/testing.md, "Test clusters"). Needs Debian's rabbitmq-server (3.10) and root: the
# broker runs as the rabbitmq account, like the packaged one.
#
#   tools/rabbitmq_cluster.sh start  DIR [--base-port N]   3 nodes, waits until all 3 run clustered
#   tools/rabbitmq_cluster.sh status DIR                   rabbitmqctl cluster_status of every node
#   tools/rabbitmq_cluster.sh stop   DIR                   SIGTERM (then SIGKILL) the PIDs in DIR
#
# Nodes rabbit1@localhost .. rabbit3@localhost. Ports, from the base port N (default 24672),
# node i = 1..3 at offset o = 10 * (i - 1):
#   N+o   AMQP (127.0.0.1)     N+o+1 Erlang distribution (127.0.0.1)
# so the default layout is 24672/24682/24692 for AMQP. Fixed layouts stay below 32768: above it,
# the kernel hands out ephemeral client ports, and a client socket may already hold one.
# The host's own broker (rabbit@localhost on 5672) is left alone; the nodes share its epmd
# (port 4369), which only maps node names to ports. Management and every other plugin are off.
#
# Every node keeps its data, logs, config and pid file under DIR/nodeI (owned by rabbitmq), and
# the three nodes and this script's rabbitmqctl calls share the Erlang cookie DIR/home/.erlang.cookie
# (not the host broker's). `start` wipes node directories left by an earlier stopped run and
# refuses while one of its nodes still runs. `stop` kills exactly the PIDs written under DIR,
# never by name, and keeps the directories (the logs) for a post-mortem.
set -euo pipefail

script_name=rabbitmq_cluster
default_base_port=24672
# shellcheck source=tools/cluster_lib.sh
. "$(dirname "$0")/cluster_lib.sh"
# RABBITMQ_CLUSTER_NODES=1 at start: node 1 alone, for a test of one broker's own state (a resource
# alarm) that must not touch the host's broker; stop and status need no such setting.
if [ "${RABBITMQ_CLUSTER_NODES:-3}" = 1 ]; then nodes=(1); fi

node_name() { echo "rabbit$1@localhost"; }
node_label() { node_name "$1"; }
amqp_port() { node_port "$1"; }
dist_port() { echo $(($(amqp_port "$1") + 1)); }

# Run a RabbitMQ command as the rabbitmq account with node n's environment (every RABBITMQ_*
# setting explicit, so neither /etc/rabbitmq nor the host broker's cookie is read).
as_node() {
  local n=$1 d
  d=$(node_dir "$n")
  shift
  setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME="$dir/home" \
    RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_NODENAME="$(node_name "$n")" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$(amqp_port "$n")" \
    RABBITMQ_DIST_PORT="$(dist_port "$n")" \
    RABBITMQ_MNESIA_BASE="$d/mnesia" \
    RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_PID_FILE="$d/pid" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    "$@"
}

ctl() {
  local n=$1
  shift
  as_node "$n" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$(node_name "$n")" "$@"
}

# The broker writes its PID to the pid file.
live_pid() {
  pid_of "$(node_dir "$1")/pid" environ "RABBITMQ_MNESIA_BASE=$(node_dir "$1")/mnesia"
}

write_config() {
  local n=$1 d
  d=$(node_dir "$n")
  mkdir -p "$d/mnesia" "$d/log"
  : >"$d/rabbitmq-env.conf"
  echo "[]." >"$d/enabled_plugins"
  echo "[]." >"$d/advanced.config"
  cat >"$d/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$(amqp_port "$n")
EOF
}

launch() {
  local n=$1 d
  d=$(node_dir "$n")
  # Its own session and no inherited descriptors: the broker outlives this script, and a caller
  # reading our output (a test) sees it end when we exit.
  as_node "$n" setsid /usr/lib/rabbitmq/bin/rabbitmq-server \
    </dev/null >>"$d/stdout.log" 2>&1 &
}

amqp_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$(amqp_port "$1")") 2>/dev/null
}

# Wait until node n's broker listens for AMQP (which it does once booted); fails when it exits.
wait_booted() {
  local n=$1 pid_seen=0
  for _ in $(seq 1 360); do
    if live_pid "$n" >/dev/null; then
      pid_seen=1
      amqp_answers "$n" && return 0
    elif [ "$pid_seen" -eq 1 ]; then
      break
    fi
    sleep 0.5
  done
  log "$(node_name "$n") did not boot; $(node_dir "$n")/log/$(node_name "$n").log ends with:"
  tail -n 30 "$(node_dir "$n")/log/$(node_name "$n").log" >&2 || true
  return 1
}

# A rabbitmqctl step of the start, its chatter kept in DIR/ctl.log (shown when it fails).
step() {
  echo "== rabbitmqctl -n $(node_name "$1") ${*:2}" >>"$dir/ctl.log"
  ctl "$@" >>"$dir/ctl.log" 2>&1 ||
    { log "rabbitmqctl -n $(node_name "$1") ${*:2} failed:"; tail -n 20 "$dir/ctl.log" >&2; return 1; }
}

running_nodes() {
  ctl "$1" -q cluster_status --formatter json 2>/dev/null |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["running_nodes"]))' 2>/dev/null
}

# The same rabbitmqctl step on nodes 2 and 3 side by side; fails when either failed.
on_joiners() {
  local p2 p3 rc=0
  step 2 "$@" &
  p2=$!
  step 3 "$@" &
  p3=$!
  wait "$p2" || rc=1
  wait "$p3" || rc=1
  return $rc
}

start() {
  local n cookie
  [ "$(id -u)" -eq 0 ] || { log "needs root (the brokers run as the rabbitmq account)"; exit 1; }
  [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] ||
    { log "rabbitmq-server is not installed (tools/dev_env.sh installs it)"; exit 1; }
  begin_start
  # The rabbitmq account must reach its directories through DIR (often a 0700 temporary one).
  chmod 755 "$dir"
  rm -rf "$dir/home" "$dir/ctl.log"
  mkdir -p "$dir/home"
  cookie=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf '%s' "$cookie" >"$dir/home/.erlang.cookie"
  chmod 400 "$dir/home/.erlang.cookie"
  for n in "${nodes[@]}"; do
    rm -rf "$(node_dir "$n")"
    write_config "$n"
  done
  chown -R rabbitmq:rabbitmq "$dir/home" "${nodes[@]/#/$dir/node}"
  # The three boot side by side; then 2 and 3 join 1.
  for n in "${nodes[@]}"; do launch "$n"; done
  for n in "${nodes[@]}"; do wait_booted "$n"; done
  # Each rabbitmqctl call boots an Erlang VM of its own (seconds on a loaded machine): the
  # joiners stop side by side, join one at a time, start side by side.
  if [ "${#nodes[@]}" -gt 1 ]; then
    on_joiners stop_app
    step 2 join_cluster "$(node_name 1)"
    step 3 join_cluster "$(node_name 1)"
    on_joiners start_app
    for _ in $(seq 1 120); do [ "$(running_nodes 1)" = 3 ] && break; sleep 0.5; done
    [ "$(running_nodes 1)" = 3 ] ||
      { log "$(node_name 1) does not see 3 running nodes after 60 s"; exit 1; }
    for n in 2 3; do wait_booted "$n"; done
  fi
  for n in "${nodes[@]}"; do
    echo "$(node_name "$n") port=$(amqp_port "$n") dist=$(dist_port "$n") pid=$(live_pid "$n")"
  done
}

status() {
  local n pid rc=0
  for n in "${nodes[@]}"; do
    if pid=$(live_pid "$n"); then
      echo "$(node_name "$n") port=$(amqp_port "$n") pid=$pid running_nodes=$(running_nodes "$n" || echo "?")"
    else
      echo "$(node_name "$n") port=$(amqp_port "$n") down"
      rc=1
    fi
  done
  for n in "${nodes[@]}"; do
    if live_pid "$n" >/dev/null; then ctl "$n" cluster_status; break; fi
  done
  return $rc
}

cluster_main "$@"
