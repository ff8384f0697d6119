# shellcheck shell=bash
# RabbitMQ, Redis, epmd, system packages and the sandbox image for
# scripts/cluster. Sourced after common.sh; expects STATE, LOGS, HOST,
# RABBITMQ_PORT, REDIS_PORT and READY_TIMEOUT / STOP_TIMEOUT.

RMQ_BIN=/usr/lib/rabbitmq/bin
RMQ_NODE=${CODEGEN_RABBITMQ_NODE:-rabbit@localhost}
RMQ_DIR=$STATE/rabbitmq
RMQ_HOME=$RMQ_DIR/home
RMQ_LOG=$RMQ_DIR/log/$RMQ_NODE.log
REDIS_DIR=$STATE/redis
EPMD_PORT=${ERL_EPMD_PORT:-4369}

# ---------------------------------------------------------------- packages

# ensure_packages: install the Debian packages whose programs are missing.
ensure_packages() {
  local -a need=()
  [[ -x $RMQ_BIN/rabbitmq-server ]] || need+=(rabbitmq-server)
  { command -v redis-server && command -v redis-cli; } >/dev/null || need+=(redis-server)
  command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
  command -v curl >/dev/null || need+=(curl)
  ((${#need[@]} == 0)) && return 0

  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "missing packages (${need[*]}) and not root: install them first"
    sudo=(sudo)
  fi
  say "installing packages: ${need[*]} (log: $(rel "$LOGS/apt.log"))"
  local t0 policy=/usr/sbin/policy-rc.d made_policy=
  t0=$(now)
  # Keep the packages' own services from starting: this script runs the
  # daemons itself, as the current user, on project-local data.
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    made_policy=1
  fi
  local rc=0
  {
    "${sudo[@]}" apt-get update &&
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"
  } >"$LOGS/apt.log" 2>&1 || rc=$?
  [[ -n $made_policy ]] && "${sudo[@]}" rm -f "$policy"
  if ((rc != 0)); then
    log_tail "$LOGS/apt.log" 30
    die "package install failed (exit $rc)"
  fi
  say "installed packages in $(elapsed "$t0")"
}

# check_port NAME PID PORT: a running service of ours must be on the port asked for.
check_port() {
  local port
  port=$(info_get "$1" port)
  [[ -z $port || $port == "$3" ]] ||
    die "$1 (pid $2) already runs on port $port, not $3: stop it first (scripts/cluster stop-service $1)"
}

# ---------------------------------------------------------------- epmd

# ensure_epmd: the Erlang port mapper, on loopback. Started (and recorded)
# only when nothing listens on its port yet; otherwise the existing one is used.
ensure_epmd() {
  local pid
  if pid=$(running_pid epmd epmd); then
    port_open "$HOST" "$EPMD_PORT" && return 0
  fi
  if port_open "$HOST" "$EPMD_PORT"; then
    return 0 # someone else's epmd (or one rabbitmq started earlier): fine to share
  fi
  local bin
  bin=$(command -v epmd) || die "epmd not found (package erlang-base)"
  (
    cd "$STATE" || exit 1
    exec setsid nohup "$bin" -address 127.0.0.1 -port "$EPMD_PORT" >>"$LOGS/epmd.log" 2>&1 </dev/null 9>&-
  ) &
  pid=$!
  echo "$pid" >"$(pidfile epmd)"
  wait_port "$HOST" "$EPMD_PORT" 10 || {
    log_tail "$LOGS/epmd.log"
    die "epmd did not listen on $HOST:$EPMD_PORT within 10s"
  }
}

stop_epmd() {
  local pid names
  pid=$(running_pid epmd epmd) || return 0
  names=$(ERL_EPMD_PORT=$EPMD_PORT timeout 5 epmd -names 2>/dev/null | grep '^name ' || true)
  if [[ -n $names ]]; then
    say "epmd (pid $pid) left running: other erlang nodes are registered ($(awk '{ printf "%s ", $2 }' <<<"$names"))"
    return 0
  fi
  stop_pids "$STOP_TIMEOUT" "epmd=$pid"
}

# ---------------------------------------------------------------- rabbitmq

rmq_env() {
  RMQ_ENV=(
    HOME="$RMQ_HOME"
    RABBITMQ_NODENAME="$RMQ_NODE"
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    RABBITMQ_NODE_PORT="$RABBITMQ_PORT"
    RABBITMQ_DIST_PORT="$((RABBITMQ_PORT + 20000))"
    RABBITMQ_MNESIA_BASE="$RMQ_DIR/mnesia"
    RABBITMQ_LOG_BASE="$RMQ_DIR/log"
    RABBITMQ_PID_FILE="$(pidfile rabbitmq)"
    RABBITMQ_CONFIG_FILE="$RMQ_DIR/rabbitmq.conf"
    RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ_DIR/advanced.config"
    RABBITMQ_CONF_ENV_FILE="$RMQ_DIR/rabbitmq-env.conf"
    RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_DIR/enabled_plugins"
    ERL_EPMD_ADDRESS=127.0.0.1
    ERL_EPMD_PORT="$EPMD_PORT"
    # an Erlang crash dump (server or CLI node) lands in the state folder, not the work tree
    ERL_CRASH_DUMP="$RMQ_DIR/erl_crash.dump"
    # distribution (server and CLI nodes) on loopback only
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
  )
}

# rmqctl_t SECONDS ARGS...: rabbitmqctl against our node, with our cookie.
rmqctl_t() {
  local t=$1
  shift
  rmq_env
  timeout "$t" env "${RMQ_ENV[@]}" "$RMQ_BIN/rabbitmqctl" -n "$RMQ_NODE" "$@" 9>&-
}

rabbitmq_pid() { running_pid rabbitmq beam.smp "-home $RMQ_HOME "; }

start_rabbitmq() {
  local pid
  if pid=$(rabbitmq_pid); then
    check_port rabbitmq "$pid" "$RABBITMQ_PORT"
    amqp_answers "$HOST" "$RABBITMQ_PORT" || rmqctl_t "$((READY_TIMEOUT + 5))" wait "$(pidfile rabbitmq)" --timeout "$READY_TIMEOUT" >/dev/null 2>&1 ||
      die "rabbitmq (pid $pid) runs but does not answer on $HOST:$RABBITMQ_PORT"
    say "rabbitmq already running (pid $pid, $HOST:$RABBITMQ_PORT)"
    return 0
  fi
  if port_open "$HOST" "$RABBITMQ_PORT"; then
    amqp_answers "$HOST" "$RABBITMQ_PORT" ||
      die "port $HOST:$RABBITMQ_PORT is in use by a process this script did not start, and it does not answer amqp"
    say "rabbitmq: $HOST:$RABBITMQ_PORT is served by a process this script did not start; it answers amqp, reusing it"
    return 0
  fi
  local dist=$((RABBITMQ_PORT + 20000))
  port_open "$HOST" "$dist" &&
    die "rabbitmq distribution port $HOST:$dist is in use by a process this script did not start"

  mkdir -p "$RMQ_HOME" "$RMQ_DIR/mnesia" "$RMQ_DIR/log"
  echo '[].' >"$RMQ_DIR/enabled_plugins" # no plugins (no management ui)
  printf '# generated by scripts/cluster; port and address come from the environment\n' >"$RMQ_DIR/rabbitmq.conf"
  : >"$RMQ_DIR/rabbitmq-env.conf" # shadows /etc/rabbitmq/rabbitmq-env.conf
  ensure_epmd

  local t0 launcher
  t0=$(now)
  rm -f "$(pidfile rabbitmq)"
  rmq_env
  (
    cd "$RMQ_DIR" || exit 1
    exec env "${RMQ_ENV[@]}" setsid nohup "$RMQ_BIN/rabbitmq-server" >>"$LOGS/rabbitmq.log" 2>&1 </dev/null 9>&-
  ) &
  launcher=$!
  # The launcher script runs beam.smp as a child; rabbit writes beam's pid to
  # the pid file early in boot. Fail fast if the launcher dies before that.
  local deadline=$((SECONDS + READY_TIMEOUT))
  until [[ -s $(pidfile rabbitmq) ]]; do
    if ! pid_alive "$launcher"; then
      log_tail "$LOGS/rabbitmq.log"
      log_tail "$RMQ_LOG"
      die "rabbitmq exited during startup"
    fi
    if ((SECONDS >= deadline)); then
      log_tail "$LOGS/rabbitmq.log"
      die "rabbitmq wrote no pid file within ${READY_TIMEOUT}s (launcher pid $launcher still runs)"
    fi
    sleep 0.2
  done
  local remaining=$((deadline - SECONDS))
  ((remaining < 5)) && remaining=5
  if ! rmqctl_t "$((remaining + 5))" wait "$(pidfile rabbitmq)" --timeout "$remaining" >"$LOGS/rabbitmq-wait.log" 2>&1; then
    log_tail "$LOGS/rabbitmq-wait.log" 10
    log_tail "$RMQ_LOG"
    die "rabbitmq did not become ready"
  fi
  pid=$(read_pidfile rabbitmq)
  echo "port=$RABBITMQ_PORT" >"$(infofile rabbitmq)"
  say "rabbitmq started (pid $pid, $HOST:$RABBITMQ_PORT) in $(elapsed "$t0")"
}

stop_rabbitmq() {
  local pid t0
  if ! pid=$(rabbitmq_pid); then
    if port_open "$HOST" "$RABBITMQ_PORT"; then
      say "rabbitmq on $HOST:$RABBITMQ_PORT was not started by this script, left alone"
    else
      say "rabbitmq not running"
    fi
    return 0
  fi
  t0=$(now)
  # 'stop PIDFILE' returns once the OS process has exited.
  if rmqctl_t "$((STOP_TIMEOUT + 5))" stop "$(pidfile rabbitmq)" >"$LOGS/rabbitmq-stop.log" 2>&1 &&
    [[ -z $(wait_exit 5 "$pid") ]]; then
    rm -f "$(pidfile rabbitmq)" "$(infofile rabbitmq)"
    say "stopped rabbitmq (pid $pid) in $(elapsed "$t0")"
  else
    log_tail "$LOGS/rabbitmq-stop.log" 5
    stop_pids "$STOP_TIMEOUT" "rabbitmq=$pid"
  fi
}

# ---------------------------------------------------------------- redis

# redis started by this script: redis-server with our data dir as working dir
redis_pid() { running_pid redis redis-server "cwd=$REDIS_DIR"; }

start_redis() {
  local pid
  if pid=$(redis_pid); then
    check_port redis "$pid" "$REDIS_PORT"
    wait_redis "$pid" || die "redis (pid $pid) runs but does not answer ping on $HOST:$REDIS_PORT"
    say "redis already running (pid $pid, $HOST:$REDIS_PORT)"
    return 0
  fi
  if port_open "$HOST" "$REDIS_PORT"; then
    redis_answers "$HOST" "$REDIS_PORT" ||
      die "port $HOST:$REDIS_PORT is in use by a process this script did not start, and it does not answer redis ping"
    say "redis: $HOST:$REDIS_PORT is served by a process this script did not start; it answers ping, reusing it"
    return 0
  fi
  mkdir -p "$REDIS_DIR"
  cat >"$REDIS_DIR/redis.conf" <<EOF
# generated by scripts/cluster
bind 127.0.0.1
port $REDIS_PORT
protected-mode yes
daemonize no
supervised no
dir "$REDIS_DIR"
appendonly yes
logfile ""
set-proc-title yes
proc-title-template "{title} {listen-addr} {server-mode}"
EOF
  local t0
  t0=$(now)
  (
    cd "$REDIS_DIR" || exit 1
    exec setsid nohup redis-server "$REDIS_DIR/redis.conf" >>"$LOGS/redis.log" 2>&1 </dev/null 9>&-
  ) &
  pid=$!
  echo "$pid" >"$(pidfile redis)"
  echo "port=$REDIS_PORT" >"$(infofile redis)"
  if ! wait_redis "$pid"; then
    log_tail "$LOGS/redis.log"
    pid_alive "$pid" || die "redis exited during startup"
    die "redis did not answer ping within ${READY_TIMEOUT}s"
  fi
  say "redis started (pid $pid, $HOST:$REDIS_PORT) in $(elapsed "$t0")"
}

# wait_redis PID: until it answers PONG, the process dies, or READY_TIMEOUT.
wait_redis() {
  local deadline=$((SECONDS + READY_TIMEOUT))
  until redis_answers "$HOST" "$REDIS_PORT"; do
    pid_alive "$1" || return 1
    ((SECONDS >= deadline)) && return 1
    sleep 0.1
  done
}

stop_redis() {
  local pid
  if pid=$(redis_pid); then
    stop_pids "$STOP_TIMEOUT" "redis=$pid"
  elif port_open "$HOST" "$REDIS_PORT"; then
    say "redis on $HOST:$REDIS_PORT was not started by this script, left alone"
  else
    say "redis not running"
  fi
}

# ---------------------------------------------------------------- sandbox image

# prefetch_images: when CODEGEN_SANDBOX_IMAGES names only some languages, download the other
# languages' packages in the background (`sandbox-images/build --prefetch`, log
# prefetch.log), beside the CPU-bound `cargo build` that leaves the network idle. It holds
# each language's build lock until its packages are in, so the build that follows (scripts/demo's
# and scripts/test's background one) waits for them instead of fetching them again. Best
# effort: a build whose prefetch failed downloads what it needs itself.
prefetch_images() {
  local script=${CODEGEN_IMAGES_BUILD:-$ROOT/sandbox-images/build} d l
  local list=${CODEGEN_SANDBOX_IMAGES:-}
  [[ -n $list && -x $script ]] || return 0
  local -a others=()
  for d in "$(dirname "$script")"/*/; do
    l=$(basename "$d")
    [[ -f $d/Dockerfile && " ${list//,/ } " != *" $l "* ]] && others+=("$l")
  done
  ((${#others[@]})) || return 0
  say "sandbox images: prefetching the other languages' packages in the background (log: $(rel "$LOGS/prefetch.log"))"
  setsid nohup "$script" --prefetch "${others[@]}" >"$LOGS/prefetch.log" 2>&1 </dev/null 9>&- &
}

# build_images: the sandbox images of CODEGEN_SANDBOX_IMAGES (languages, space- or
# comma-separated; default every language). Workers are ready once the warm-at-start
# languages' images (python, javascript, bash) are there; another language's image is needed
# at its first execution, which answers `sandbox_error` naming the build command until then.
build_images() {
  local script=${CODEGEN_IMAGES_BUILD:-$ROOT/sandbox-images/build}
  [[ -x $script ]] || die "sandbox image build script not found or not executable: $script"
  local t0 rc=0
  local -a langs=()
  local list=${CODEGEN_SANDBOX_IMAGES:-}
  read -r -a langs <<<"${list//,/ }"
  t0=$(now)
  say "sandbox images: running $(rel "$script") ${langs[*]:-(every language)}"
  "$script" "${langs[@]}" 9>&- 2>&1 | sed -u 's/^/  /' || rc=$?
  ((rc == 0)) || die "sandbox image build failed (exit $rc)"
  say "sandbox images ready ($(elapsed "$t0"))"
}
