#!/bin/bash
# Pack every part of a carla-wds plan without SLURM: PROCS processes at a time on this machine
# (xargs -P), or spread over machines by ssh (HOSTS="node1 node2 ..."; each host runs PROCS).
# Finished parts are skipped and interrupted ones resume, so running it again after a failure
# packs only what is left (carla-wds pack-status OUT says what that is). docs/cluster.md.
# Write this file anywhere with `carla-wds slurm-script --xargs --out pack_xargs.sh`; it runs
# from any folder.
#
#   ./pack_xargs.sh INPUT OUT PROCS [pack options, e.g. --layout bench2drive]
#   HOSTS="gpu1 gpu2" ./pack_xargs.sh INPUT OUT 8 --layout bench2drive
#
# With HOSTS, INPUT and OUT must be the same paths on every host (a shared file system, or
# s3:// prefixes) and carla-wds on each host's PATH (or CARLA_WDS=/path/to/carla-wds).
set -euo pipefail
if [ "$#" -lt 3 ]; then
    echo "usage: $0 INPUT OUT PROCS [pack options]" >&2
    exit 2
fi
input=$1
out=$2
procs=$3
shift 3
exe=${CARLA_WDS:-carla-wds}
# the plan's part count, read by carla-wds itself (so OUT may be an s3:// prefix too)
parts=$("$exe" pack-status "$out" | sed -n 's/.* of \([0-9][0-9]*\) parts$/\1/p')
if [ -z "$parts" ]; then
    echo "$0: found no plan's part count in '$exe pack-status $out'. Fix: carla-wds plan INPUT $out ..." >&2
    exit 2
fi
read -r -a hosts <<< "${HOSTS:-}"
slots=$(( procs * (${#hosts[@]} > 0 ? ${#hosts[@]} : 1) ))
args=$(printf ' %q' "$exe" pack "$input" "$out" --plan "$out/plan.json" "$@")

run_part() {   # part -> one pack process, here or on host (part mod number of hosts)
    local part=$1
    if [ "${#hosts[@]}" -eq 0 ]; then
        eval "$args --part $part"
    else
        ssh -o BatchMode=yes "${hosts[$(( part % ${#hosts[@]} ))]}" "$args --part $part"
    fi
}
export -f run_part
export args
export HOSTS_LIST="${hosts[*]:-}"
# xargs runs each part in a fresh bash; hand it the host list and the command line
seq 0 $(( parts - 1 )) | xargs -P "$slots" -I{} bash -c \
    'read -r -a hosts <<< "$HOSTS_LIST"; run_part "$1"' _ {} || status=$?
"$exe" pack-status "$out"
exit "${status:-0}"
