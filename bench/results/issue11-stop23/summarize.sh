#!/bin/bash
# summ3.sh DIR : the issue-table figures of one sitting
for side in before after; do
 f=$1/$side.txt
 echo "## $side"
 awk -v side=$side '
  /^=== /{name=$2; sub(":","",name)}
  /^steps\/s  / && (name=="inproc-c1"||name=="inproc-c16"||name=="hitl-c16"){print name, "steps/s", $2}
  /^CPU ms\/step, process/ && (name=="inproc-c1"||name=="inproc-c16"){print name, "cpu", $4}
  /^journal records\/step/ && name=="inproc-c1"{print name, "records", $3}
  /^journal commits\/step/ && name=="inproc-c1"{print name, "commits", $3}
  /^device flushes\/step/ && name=="inproc-c1"{print name, "flushes", $4}
  /CPU ms\/step: daemon/ {print name, $0}
  /  steps\/s: / {print name, $0}
 ' $f
 grep -h '"ratios"' $1/$side.txt | sed 's/^/journal /'
 grep -h '"config": "verify"' $1/$side.txt | sed 's/^/journal /'
done
