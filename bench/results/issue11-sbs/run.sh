#!/usr/bin/env bash
# Side by side, one sitting: the #11 "before" tree (62a9377) and HEAD, each with its own bench.
set -u
PY=/work/venv/bin/python
one() {  # tree label
  cd "$1"; export PYTHONPATH="$1/src:$1/generated/python:$1"
  R=/tmp/sbs/$2; mkdir -p "$R"
  run() { name=$1; shift; echo "=== $2 $name: python -m bench $* ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"; $PY -m bench "$@"; echo "exit $?"; }
  run inproc-c1   tool-loop -n 200 -k 10 -c 1  -r 3 --json $R/inproc-c1.json
  run inproc-c16  tool-loop -n 200 -k 10 -c 16 -r 3 --json $R/inproc-c16.json
  run hitl-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --hitl --json $R/hitl-c16.json
  run grpc-c1     tool-loop -n 200 -k 10 -c 1  -r 3 --transport grpc --compare-inproc --json $R/grpc-c1.json
  run grpc-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --transport grpc --compare-inproc --json $R/grpc-c16.json
  run http-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --transport http --compare-inproc --json $R/http-c16.json
  run journal     journal --json $R/journal.json
}
echo "=== start $(date +%T)"
one /tmp/wt-before before > /tmp/sbs/before.txt 2>&1
one /tmp/wt-after after > /tmp/sbs/after.txt 2>&1
echo "=== done $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
