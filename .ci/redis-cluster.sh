#!/usr/bin/env bash
# A local Redis Cluster for the tests (the "redis-cluster" store kind, tests/stores.py): three
# masters, no replicas, on 127.0.0.1:7000-7002, nothing persisted.
#   .ci/redis-cluster.sh start   start it, unless a cluster already answers there; returns once
#                                every node says cluster_state:ok (at most WAIT seconds)
#   .ci/redis-cluster.sh stop    shut the three nodes down and forget their cluster
# The nodes' files (nodes-700N.conf, logs) are in $TELAR_CLUSTER_DIR (default: a folder of /tmp).
set -euo pipefail

PORTS=(7000 7001 7002)
DIR="${TELAR_CLUSTER_DIR:-${TMPDIR:-/tmp}/telar-redis-cluster}"
WAIT=30  # seconds

answers() { redis-cli -h 127.0.0.1 -p "$1" ping >/dev/null 2>&1; }
state_ok() { redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'; }
all_ok() {
  local port
  for port in "${PORTS[@]}"; do state_ok "$port" || return 1; done
}

# wait_for WHAT CHECK...: run CHECK until it succeeds, failing after WAIT seconds.
wait_for() {
  local what=$1 deadline=$((SECONDS + WAIT))
  shift
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "redis-cluster: $what not reached within $WAIT s (logs in $DIR)" >&2
      exit 1
    fi
    sleep 0.2
  done
}

start() {
  if all_ok; then
    echo "redis-cluster: already running on 127.0.0.1:${PORTS[0]}-${PORTS[-1]}"
    return
  fi
  mkdir -p "$DIR"
  local port running=0
  for port in "${PORTS[@]}"; do answers "$port" && running=1; done
  if [ "$running" -eq 0 ]; then
    rm -f "$DIR"/nodes-*.conf  # a cluster from an earlier run: its nodes start afresh, empty
  fi
  for port in "${PORTS[@]}"; do
    if ! answers "$port"; then
      redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$DIR/nodes-$port.conf" --dir "$DIR" --logfile "$DIR/$port.log" \
        --save "" --appendonly no --daemonize yes
    fi
  done
  for port in "${PORTS[@]}"; do wait_for "node $port answering" answers "$port"; done
  if [ "$(redis-cli -h 127.0.0.1 -p "${PORTS[0]}" cluster info | tr -d '\r' | sed -n 's/^cluster_slots_assigned://p')" = "0" ]; then
    timeout "$WAIT" redis-cli --cluster create "${PORTS[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >/dev/null
  fi
  wait_for "cluster_state:ok on every node" all_ok
  echo "redis-cluster: running on 127.0.0.1:${PORTS[0]}-${PORTS[-1]}"
}

stop() {
  local port
  for port in "${PORTS[@]}"; do
    if answers "$port"; then
      redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
    fi
  done
  rm -f "$DIR"/nodes-*.conf
  echo "redis-cluster: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
