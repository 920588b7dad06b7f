#!/usr/bin/env bash
# A profiler over the play of one side-by-side harness run, and nothing
# else (BENCHMARKS.md, "Where a turn of 1000 × 1 × 5 goes"): a fresh
# questd and SQLite database, the driver's warm-up (20 × 1 × 10), then the
# scenario with the tool attached from the driver's `setup done` to the
# end of its play, before it closes its sockets. The driver is a copy of
# HARNESS_DIR/drive.mjs that logs `play done` at that point and waits
# 300 ms before closing.
#
#   benchmarks/experiments/play-window.sh perf     QUESTD_BIN SESSIONS SPECTATORS TURNS HARNESS_DIR OUT
#   benchmarks/experiments/play-window.sh callgrind QUESTD_BIN SESSIONS SPECTATORS TURNS HARNESS_DIR OUT
#
# perf: `perf record -e cpu-clock -F 20000 -g` of the server into OUT
# (then `perf report -i OUT`). callgrind: the server runs under valgrind;
# its counters are zeroed at `setup done` and dumped at `play done` into
# OUT.1 (then `callgrind_annotate OUT.1`; divide by the play's turns).
# PLAY_WINDOW_TARGET=limit measures the harness's bare broadcast server
# instead: QUESTD_BIN is then its binary (HARNESS_DIR/limit/target/
# release/peer-limit), started on the same port.
set -euo pipefail
tool=$1 bin=$2 sessions=$3 spectators=$4 turns=$5 harness=$6 out=$7
port=${PLAY_WINDOW_PORT:-18640}
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

# The driver, with `play done` logged where it stops measuring.
grep -q '^  closing = true;$' "$harness/drive.mjs" || {
  echo "play-window: $harness/drive.mjs has no 'closing = true;' line to mark" >&2
  exit 1
}
sed 's/^  closing = true;$/  log("play done");\n  await sleep(300);\n  closing = true;/' \
  "$harness/drive.mjs" >"$dir/drive.mjs"

target=${PLAY_WINDOW_TARGET:-questd}
case "$target" in
  questd) run=("$bin" serve) url="http://127.0.0.1:$port" ;;
  limit) run=("$bin" "127.0.0.1:$port") url="ws://127.0.0.1:$port" ;;
  *) echo "play-window: PLAY_WINDOW_TARGET is questd or limit" >&2; exit 1 ;;
esac
case "$tool" in
  perf) ;;
  callgrind) run=(valgrind --tool=callgrind --callgrind-out-file="$out" "${run[@]}") ;;
  *) echo "play-window: the tool is perf or callgrind" >&2; exit 1 ;;
esac
QUESTD_BIND="127.0.0.1:$port" QUESTD_DATABASE_URL="sqlite://$dir/q.db" QUESTD_LLM_PROVIDER=offline \
  QUESTD_CHAT_PER_MINUTE=1000000 QUESTD_CHAT_BURST=100000 \
  QUESTD_CREATE_PER_MINUTE=1000000 QUESTD_CREATE_BURST=1000000 \
  "${run[@]}" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.2
done
drive=(node --experimental-websocket --no-warnings "$dir/drive.mjs" --target "$target"
  --url "$url" --turn-timeout-ms 120000)
"${drive[@]}" --sessions 20 --spectators 1 --turns 10 --json >/dev/null

recorder=""
start() {
  case "$tool" in
    perf)
      perf record -e cpu-clock -F 20000 -g -p "$pid" -o "$out" >/dev/null 2>&1 &
      recorder=$!
      ;;
    callgrind) callgrind_control -z "$pid" >/dev/null 2>&1 ;;
  esac
}
stop() {
  case "$tool" in
    perf) kill -INT "$recorder"; wait "$recorder" || true ;;
    callgrind) callgrind_control -d "$pid" >/dev/null 2>&1 ;;
  esac
}
# The driver's log goes to stderr; its report (the last stdout line) to a file.
while IFS= read -r line; do
  case "$line" in
    *"setup done"*) start ;;
    *"play done"*) stop ;;
  esac
done < <("${drive[@]}" --sessions "$sessions" --spectators "$spectators" --turns "$turns" \
  2>&1 >"$dir/report")
tail -n 1 "$dir/report" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print("turns", r["turns_completed"], "errors", r["errors"], "violations", r["protocol_violations"])'
