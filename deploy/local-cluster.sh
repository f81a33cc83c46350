#!/usr/bin/env bash
# deploy/local-cluster.sh N [MODEL]
#
# Starts N `cinder serve` replicas and nginx (deploy/nginx/cinder.conf: consistent hashing on the
# X-Session-Id header) on loopback, prints where they listen, and stops everything it started on
# exit, Ctrl-C or SIGTERM. Installs Debian's nginx package when nginx is missing.
#
# Output (stdout, one line each, for people and scripts):
#     replica replica-1 http://127.0.0.1:8801 pid 12345
#     ...
#     balancer http://127.0.0.1:8800
#     ready
#
# Environment:
#   CINDER_BIN          the cinder binary (default: `cinder` on PATH, else built with cargo)
#   CINDER_CLUSTER_PORT nginx's port; replica i listens on CINDER_CLUSTER_PORT+i (default 8800)
#   CINDER_LB_POLICY    session (default) | round-robin (the same nginx file without the hash line,
#                       to measure what stickiness buys)
#   CINDER_THREADS      CPU threads per replica (default: cores / N, at least 1)
#   CINDER_SERVE_ARGS   extra `cinder serve` flags (default: --kv-memory 256MiB)
#   CINDER_CLUSTER_DIR  where configs and logs go (default: a new temporary directory)
set -euo pipefail

usage() { echo "usage: $0 N [MODEL]   (N replicas, MODEL default smollm2-135m)" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
N=$1
MODEL=${2:-smollm2-135m}
[[ $N =~ ^[1-9][0-9]*$ ]] || usage
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PORT=${CINDER_CLUSTER_PORT:-8800}
POLICY=${CINDER_LB_POLICY:-session}
CORES=$(nproc 2>/dev/null || echo 1)
THREADS=${CINDER_THREADS:-$(( CORES / N > 0 ? CORES / N : 1 ))}
read -r -a SERVE_ARGS <<< "${CINDER_SERVE_ARGS:---kv-memory 256MiB}"
DIR=${CINDER_CLUSTER_DIR:-$(mktemp -d -t cinder-cluster.XXXXXX)}
mkdir -p "$DIR/tmp"

case $POLICY in session|round-robin) ;; *) echo "CINDER_LB_POLICY: session or round-robin, not '$POLICY'" >&2; exit 2 ;; esac

# --- what runs -----------------------------------------------------------------------------------
BIN=${CINDER_BIN:-$(command -v cinder || true)}
if [[ -z $BIN ]]; then
    echo "building cinder (cargo build --release)..." >&2
    (cd "$ROOT" && cargo build --release --bin cinder >&2)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/cinder
fi
[[ -x $BIN ]] || { echo "no cinder binary at '$BIN'" >&2; exit 1; }

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ! -x $NGINX ]]; then
    echo "installing nginx (apt-get)..." >&2
    if [[ $(id -u) -eq 0 ]]; then SUDO=""; else SUDO=sudo; fi
    $SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nginx >&2
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
fi

# --- stopping: everything this script started, whatever way it ends --------------------------------
PIDS=()
NGINX_PID=""
cleanup() {
    trap - EXIT INT TERM
    [[ -n $NGINX_PID ]] && kill -QUIT "$NGINX_PID" 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    # Replicas drain their streams on SIGTERM; give them a moment, then make sure.
    for _ in $(seq 50); do
        alive=0
        for p in "${PIDS[@]}" $NGINX_PID; do kill -0 "$p" 2>/dev/null && alive=1; done
        [[ $alive -eq 0 ]] && break
        sleep 0.2
    done
    for p in "${PIDS[@]}" $NGINX_PID; do kill -KILL "$p" 2>/dev/null || true; done
    [[ -z ${CINDER_CLUSTER_DIR:-} ]] && rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for i in $(seq 0 "$N"); do
    port_free $((PORT + i)) || { echo "port $((PORT + i)) is in use (set CINDER_CLUSTER_PORT)" >&2; exit 1; }
done

# --- replicas --------------------------------------------------------------------------------------
for i in $(seq 1 "$N"); do
    "$BIN" --threads "$THREADS" serve "$MODEL" --host 127.0.0.1 --port $((PORT + i)) --no-grpc \
        --replica-id "replica-$i" "${SERVE_ARGS[@]}" >"$DIR/replica-$i.log" 2>&1 &
    PIDS+=($!)
done

ready() ( # GET /ready answers 200 once the model is loaded and the engine runs
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET /ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    read -r -t 5 _ status _ <&3 || exit 1
    [[ $status == 200 ]]
)
deadline=$((SECONDS + ${CINDER_CLUSTER_START_TIMEOUT:-300}))
for i in $(seq 1 "$N"); do
    until ready $((PORT + i)) 2>/dev/null; do
        if ! kill -0 "${PIDS[i-1]}" 2>/dev/null; then
            echo "replica-$i exited while starting; its log:" >&2
            tail -n 20 "$DIR/replica-$i.log" >&2
            exit 1
        fi
        if (( SECONDS > deadline )); then echo "replica-$i not ready in time" >&2; exit 1; fi
        sleep 0.2
    done
    echo "replica replica-$i http://127.0.0.1:$((PORT + i)) pid ${PIDS[i-1]}"
done

# --- nginx -----------------------------------------------------------------------------------------
: >"$DIR/cinder-replicas.conf"
for i in $(seq 1 "$N"); do
    echo "server 127.0.0.1:$((PORT + i)) max_fails=2 fail_timeout=10s;" >>"$DIR/cinder-replicas.conf"
done
sed -e "s|^\( *\)listen 8000;|\1listen 127.0.0.1:$PORT;|" \
    -e "s|/var/log/nginx/cinder.access.log|$DIR/access.log|" \
    "$ROOT/deploy/nginx/cinder.conf" >"$DIR/cinder.conf"
if [[ $POLICY == round-robin ]]; then
    sed -i '/hash \$cinder_session_key consistent;/d' "$DIR/cinder.conf"
fi
cat >"$DIR/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $DIR/nginx.pid;
error_log $DIR/error.log warn;
events { worker_connections 1024; }
http {
    client_body_temp_path $DIR/tmp/body;
    proxy_temp_path $DIR/tmp/proxy;
    fastcgi_temp_path $DIR/tmp/fastcgi;
    uwsgi_temp_path $DIR/tmp/uwsgi;
    scgi_temp_path $DIR/tmp/scgi;
    include $DIR/cinder.conf;
}
CONF
"$NGINX" -t -q -p "$DIR" -c "$DIR/nginx.conf" -e "$DIR/error.log" >&2
"$NGINX" -p "$DIR" -c "$DIR/nginx.conf" -e "$DIR/error.log" &
NGINX_PID=$!
for _ in $(seq 100); do
    port_free "$PORT" || break
    kill -0 "$NGINX_PID" 2>/dev/null || { echo "nginx exited; see $DIR/error.log" >&2; cat "$DIR/error.log" >&2; exit 1; }
    sleep 0.1
done
echo "balancer http://127.0.0.1:$PORT"
echo "logs $DIR"
echo "ready"

# Runs until nginx ends or this script is told to stop (a replica may die: the balancer routes
# around it, which is what the failure test exercises).
wait "$NGINX_PID"
