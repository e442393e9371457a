#!/usr/bin/env bash
# gRPC vs in process, before (BASE tree) and after (AFTER tree), alternating in one sitting:
# PAIRS pairs of single runs (-r 1, each with its own --compare-inproc) at C=16, then at C=1.
# Usage: run.sh BASE_TREE AFTER_TREE OUT_DIR SITTING [PAIRS]
set -u
PY=/work/venv/bin/python
BASE=$1; AFTER=$2; OUT=$3; S=$4; PAIRS=${5:-3}
mkdir -p "$OUT"
for c in 16 1; do
  for i in $(seq 1 "$PAIRS"); do
    for tree in base after; do
      dir=$BASE; [ $tree = after ] && dir=$AFTER
      (cd "$dir" && PYTHONPATH="$dir/src:$dir/generated/python:$dir" $PY -m bench tool-loop \
        -n 200 -k 10 -c $c -r 1 --transport grpc --compare-inproc \
        --json "$OUT/s$S-$tree-c$c-$i.json" > /dev/null 2>&1)
    done
  done
done
