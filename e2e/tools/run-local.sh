#!/usr/bin/env bash
# make run: three modelsim backends and one tether-sidecar (memory store) on
# loopback, until Ctrl-C. Ports can be moved with TETHER_PORT (the sidecar's
# proxy port; admin is +19, backends +1000..+1002).
set -euo pipefail
bin=${1:?usage: run-local.sh BIN_DIR}
port=${TETHER_PORT:-15001}
admin=$((port + 19))
work=$(mktemp -d)
pids=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

backends=()
for i in 1 2 3; do
  addr=127.0.0.1:$((port + 999 + i))
  "$bin/modelsim" --listen "$addr" --id "backend-$i" --prefill-per-token 2ms --decode-per-token 20ms \
    >"$work/modelsim-$i.out" 2>"$work/modelsim-$i.log" &
  pids+=($!)
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
pids+=($!)

for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null || { echo "sidecar did not become ready" >&2; exit 1; }

turn1='{"model":"modelsim","max_tokens":8,"messages":[{"role":"user","content":"You are a careful assistant. Summarise the plot of Hamlet in three short sentences, please, and keep it plain."}]}'
turn2='{"model":"modelsim","max_tokens":8,"messages":[{"role":"user","content":"You are a careful assistant. Summarise the plot of Hamlet in three short sentences, please, and keep it plain."},{"role":"assistant","content":"Hamlet seeks revenge."},{"role":"user","content":"Now do Macbeth."}]}'
cat <<MSG

tether is up: sidecar on 127.0.0.1:$port (admin 127.0.0.1:$admin), backends ${backends[*]}.
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
  echo "  served by $id, cached_tokens=${cached:-0}"
done
echo
echo "Ctrl-C to stop."
wait
