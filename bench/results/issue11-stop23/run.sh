#!/usr/bin/env bash
# Issue 11, before and after, side by side in one sitting: the #11 "before" tree (62a9377)
# and the final tree, each with its own bench/. Usage: run.sh BEFORE_TREE AFTER_TREE OUT_DIR
set -u
PY=/work/venv/bin/python
BEFORE=$1; AFTER=$2; OUT=$3
one() {  # tree label extra-after-only
  cd "$1"; export PYTHONPATH="$1/src:$1/generated/python:$1"
  R=$OUT/$2; mkdir -p "$R"
  run() { name=$1; shift; echo "=== $name: python -m bench $* ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"; $PY -m bench "$@"; echo "exit $?"; }
  run inproc-c1   tool-loop -n 200 -k 10 -c 1  -r 3 --json $R/inproc-c1.json
  run inproc-c16  tool-loop -n 200 -k 10 -c 16 -r 3 --json $R/inproc-c16.json
  run hitl-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --hitl --json $R/hitl-c16.json
  run grpc-c1     tool-loop -n 200 -k 10 -c 1  -r 3 --transport grpc --compare-inproc --json $R/grpc-c1.json
  run grpc-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --transport grpc --compare-inproc --json $R/grpc-c16.json
  run http-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --transport http --compare-inproc --json $R/http-c16.json
  if [ "$3" = after ]; then
    # The before tree's call shape (CreateRun + WatchRun + GetRun) and the daemon's defaults.
    run grpc-c16-cwg  tool-loop -n 200 -k 10 -c 16 -r 3 --transport grpc --rpc create-watch-get --compare-inproc --json $R/grpc-c16-cwg.json
    run grpc-c1-cwg   tool-loop -n 200 -k 10 -c 1 -r 3 --transport grpc --rpc create-watch-get --compare-inproc --json $R/grpc-c1-cwg.json
    run grpc-c16-refl tool-loop -n 200 -k 10 -c 16 -r 3 --transport grpc --daemon-reflection --compare-inproc --json $R/grpc-c16-refl.json
  fi
  run journal     journal --json $R/journal.json
}
echo "=== start $(date +%T)"
one "$BEFORE" before before > $OUT/before.txt 2>&1
one "$AFTER" after after > $OUT/after.txt 2>&1
echo "=== done $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
