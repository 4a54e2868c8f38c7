#!/usr/bin/env bash
# make run: three modelsim backends and one tether-sidecar (memory store) on
# loopback, until Ctrl-C. Ports can be moved with TETHER_PORT (the sidecar's
# proxy port; admin is +19, backends +1000..+1002). Every port is checked
# before anything starts: something already listening there would answer
# in tether's place. If the sidecar or a backend dies, the script stops the
# others and exits non-zero.
set -euo pipefail
bin=${1:?usage: run-local.sh BIN_DIR}
port=${TETHER_PORT:-17001}
admin=$((port + 19))
if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1024 || port + 1002 > 65535)); then
  echo "error: TETHER_PORT=$port: want a port from 1024 to 64533 (the backends take +1000..+1002)" >&2
  exit 2
fi

# in_use PORT: true when something accepts connections on 127.0.0.1:PORT.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
busy=()
for p in "$port:sidecar proxy" "$admin:sidecar admin" "$((port + 1000)):backend 1" "$((port + 1001)):backend 2" "$((port + 1002)):backend 3"; do
  if in_use "${p%%:*}"; then busy+=("  127.0.0.1:${p%%:*} (${p#*:})"); fi
done
if ((${#busy[@]} > 0)); then
  {
    echo "error: these ports are already in use, and requests would reach whatever listens there:"
    printf '%s\n' "${busy[@]}"
    echo "stop that process, or move every port: TETHER_PORT=$((port + 10000)) make run"
  } >&2
  exit 1
fi

work=$(mktemp -d)
pids=()
names=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 0' INT TERM # Ctrl-C is how a run ends: stop everything, exit 0

backends=()
for i in 1 2 3; do
  addr=127.0.0.1:$((port + 999 + i))
  "$bin/modelsim" --listen "$addr" --id "backend-$i" --prefill-per-token 2ms --decode-per-token 20ms \
    >"$work/modelsim-$i.out" 2>"$work/modelsim-$i.log" &
  pids+=($!)
  names+=("modelsim backend-$i")
  backends+=("\"$addr\"")
done

cat >"$work/tether.yaml" <<YAML
listen: 127.0.0.1:$port
admin: 127.0.0.1:$admin
store: {backend: memory}
pools:
  - name: default/modelsim
    sessionSticky:
      sessionAffinitySeconds: 300
      sources:
        - {type: Header, name: X-Session-ID}
        - {type: Query, name: session_id}
        - {type: Cookie, name: session_sid}
    backends:
      static: [$(IFS=,; echo "${backends[*]}")]
YAML

"$bin/tether-sidecar" --config "$work/tether.yaml" 2> >(tee "$work/sidecar.log" >&2) &
sidecar=$!
pids+=("$sidecar")
names+=("tether-sidecar")

# died: the name of a started process that is no longer running, if any.
died() {
  local i
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then echo "${names[$i]}"; return 0; fi
  done
  return 1
}

ready=
for _ in $(seq 100); do
  if gone=$(died); then
    echo "error: $gone exited during start-up (see its log above)" >&2
    exit 1
  fi
  if curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[[ -n $ready ]] || { echo "error: the sidecar did not become ready within 10s" >&2; exit 1; }

# after_log n: wait (at most a second) until the sidecar has logged n
# requests, so that each result below prints after its access line
# rather than among the next step's (the log is written in batches).
after_log() {
  for _ in $(seq 20); do
    (( $(grep -c '"msg":"request"' "$work/sidecar.log") >= $1 )) && return 0
    sleep 0.05
  done
}
logged=0

turn1='{"model":"modelsim","max_tokens":8,"messages":[{"role":"user","content":"You are a careful assistant. Summarise the plot of Hamlet in three short sentences, please, and keep it plain."}]}'
turn2='{"model":"modelsim","max_tokens":8,"messages":[{"role":"user","content":"You are a careful assistant. Summarise the plot of Hamlet in three short sentences, please, and keep it plain."},{"role":"assistant","content":"Hamlet seeks revenge."},{"role":"user","content":"Now do Macbeth."}]}'
cat <<MSG

tether is up: sidecar on 127.0.0.1:$port (admin 127.0.0.1:$admin, pid $sidecar), backends ${backends[*]}.
Two turns of one session (look at X-Modelsim-Id and cached_tokens):

  curl -s -D- -H 'X-Session-ID: demo' -H 'Content-Type: application/json' http://127.0.0.1:$port/v1/chat/completions -d '$turn1'
  curl -s -D- -H 'X-Session-ID: demo' -H 'Content-Type: application/json' http://127.0.0.1:$port/v1/chat/completions -d '$turn2'

Binding: curl -s 'http://127.0.0.1:$admin/debug/bindings?pool=default/modelsim&key=demo'
Metrics: curl -s http://127.0.0.1:$admin/metrics | grep ^tether_

Running the two turns now:
MSG
for t in "$turn1" "$turn2"; do
  out=$(curl -s -D "$work/h" -H 'X-Session-ID: demo' -H 'Content-Type: application/json' \
    "http://127.0.0.1:$port/v1/chat/completions" -d "$t")
  id=$(grep -i '^x-modelsim-id:' "$work/h" | tr -d '\r' | awk '{print $2}')
  cached=$(grep -o '"cached_tokens":[0-9]*' <<<"$out" | cut -d: -f2)
  after_log $((++logged))
  echo "  served by $id, cached_tokens=${cached:-0}"
done

# The Responses API: the backend keeps the response in its memory;
# tether binds its id to that backend, so the next turn (which names it
# in previous_response_id) goes there, through any router replica.
resp1='{"model":"modelsim","max_output_tokens":8,"input":"You are a careful assistant. Name three plays by Shakespeare and say in one line what each is about."}'
resp2='{"model":"modelsim","max_output_tokens":8,"previous_response_id":"RESP_ID","input":"Which of them is the shortest?"}'
cat <<MSG

Responses API: two turns chained by previous_response_id (no session header: the response id is the key):

  curl -s -D- -H 'Content-Type: application/json' http://127.0.0.1:$port/v1/responses -d '$resp1'
  curl -s -D- -H 'Content-Type: application/json' http://127.0.0.1:$port/v1/responses -d '${resp2/RESP_ID/<the id of the first answer>}'

Running them now:
MSG
prev=
for t in "$resp1" "$resp2"; do
  out=$(curl -s -D "$work/h" -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/responses" -d "${t/RESP_ID/$prev}")
  by=$(grep -i '^x-modelsim-id:' "$work/h" | tr -d '\r' | awk '{print $2}')
  rid=$(grep -o '"id":"resp_[0-9a-f]*"' <<<"$out" | head -1 | cut -d'"' -f4)
  cached=$(grep -o '"cached_tokens":[0-9]*' <<<"$out" | cut -d: -f2)
  after_log $((++logged))
  if [[ -z $prev ]]; then
    echo "  response $rid stored on $by"
  else
    echo "  response $rid (previous_response_id $prev) answered by $by, cached_tokens=${cached:-0}"
  fi
  prev=$rid
done
echo
echo "Ctrl-C to stop."

# Until Ctrl-C, or until a process dies: then stop the rest and fail.
rc=0
wait -n "${pids[@]}" || rc=$?
gone=$(died || echo "a process")
echo "error: $gone exited (status $rc) while running; stopping the others" >&2
exit 1
