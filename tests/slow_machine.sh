#!/usr/bin/env bash
# Run a command as on a 2-core machine about 3x slower per core than this one: the command and
# everything it starts share a CPU quota of a third of two cores (66666 us of CPU per 100000 us).
#   sudo tests/slow_machine.sh make test
#   tests/slow_machine.sh .venv/bin/python -m pytest -q tests/e2e/test_up.py
# Needs root (it makes a cgroup). cgroup v1: the cpu controller's cpu.cfs_quota_us; v2: cpu.max.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
QUOTA_US=${EPOCHAL_SLOW_QUOTA_US:-66666}
PERIOD_US=100000
NAME="epochal-slow-$$"

if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then  # cgroup v1
  group="/sys/fs/cgroup/cpu/$NAME"
  mkdir "$group"
  echo "$PERIOD_US" > "$group/cpu.cfs_period_us"
  echo "$QUOTA_US" > "$group/cpu.cfs_quota_us"
  members="$group/tasks"
else  # cgroup v2: a child of this shell's cgroup's parent, with the cpu controller enabled
  parent="/sys/fs/cgroup$(dirname "$(cut -d: -f3 /proc/self/cgroup)")"
  grep -qw cpu "$parent/cgroup.subtree_control" || echo +cpu > "$parent/cgroup.subtree_control"
  group="$parent/$NAME"
  mkdir "$group"
  echo "$QUOTA_US $PERIOD_US" > "$group/cpu.max"
  members="$group/cgroup.procs"
fi
# The group goes once the command and its processes have (a leftover keeps it: say so).
trap 'rmdir "$group" 2>/dev/null || echo "note: $group still has processes" >&2' EXIT
echo "slow machine: ${QUOTA_US}/${PERIOD_US} us of CPU (cgroup $group) for: $*" >&2
started=$(date +%s)
status=0
(echo "$BASHPID" > "$members" && exec "$@") || status=$?
echo "slow machine: exit $status after $(($(date +%s) - started)) s" >&2
exit "$status"
