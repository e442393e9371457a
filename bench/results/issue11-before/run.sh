#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src:$PWD/generated/python"
PY=/work/venv/bin/python
R=${1:-/tmp/hb-results}; mkdir -p "$R"
run() { name=$1; shift; echo "=== $name: python -m bench $* ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"; $PY -m bench "$@"; echo "exit $?"; }
run inproc-c1   tool-loop -n 200 -k 10 -c 1  -r 3 --json $R/inproc-c1.json
run inproc-c16  tool-loop -n 200 -k 10 -c 16 -r 3 --json $R/inproc-c16.json
run hitl-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --hitl --json $R/hitl-c16.json
run grpc-c1     tool-loop -n 200 -k 10 -c 1  -r 3 --transport grpc --compare-inproc --json $R/grpc-c1.json
run grpc-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --transport grpc --compare-inproc --json $R/grpc-c16.json
run http-c16    tool-loop -n 200 -k 10 -c 16 -r 3 --transport http --compare-inproc --json $R/http-c16.json
run journal     journal --json $R/journal.json
echo "=== done $(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
