#!/usr/bin/env bash
# What the two per-session indexes cost a turn, at most (BENCHMARKS.md,
# "What durability costs a turn"): one run of the side-by-side harness's
# driver against a fresh questd and database, with the indexes
# `journal_by_session` and `audit_by_session` dropped after start (DROP=1)
# or kept (DROP=0). Prints the server's CPU per turn in µs. A server
# without those indexes answers reads of a session's journal and ledger
# by scanning: a measuring device only.
#
#   benchmarks/experiments/drop-indexes.sh QUESTD_BIN DROP SESSIONS SPECTATORS TURNS HARNESS_DIR
set -euo pipefail
bin=$1 drop=$2 sessions=$3 spectators=$4 turns=$5 harness=$6
port=${DROP_INDEXES_PORT:-18620}
db=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$db"' EXIT
QUESTD_BIND="127.0.0.1:$port" QUESTD_DATABASE_URL="sqlite://$db/q.db" QUESTD_LLM_PROVIDER=offline \
  QUESTD_CHAT_PER_MINUTE=1000000 QUESTD_CHAT_BURST=100000 \
  QUESTD_CREATE_PER_MINUTE=1000000 QUESTD_CREATE_BURST=1000000 \
  "$bin" serve >"$db/log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
if [ "$drop" = 1 ]; then
  python3 - "$db/q.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=10)
c.execute("DROP INDEX journal_by_session")
c.execute("DROP INDEX audit_by_session")
c.commit()
PY
fi
drive=(node --experimental-websocket "$harness/drive.mjs" --target questd --url "http://127.0.0.1:$port" --json)
"${drive[@]}" --sessions 20 --spectators 1 --turns 10 >/dev/null
"${drive[@]}" --sessions "$sessions" --spectators "$spectators" --turns "$turns" --server-pid "$pid" \
  | tail -n 1 | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const r=JSON.parse(s);console.log(r.server.cpu_us_per_turn, r.errors ? "errors: " + r.errors : "")})'
