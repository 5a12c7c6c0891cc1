#!/usr/bin/env bash
# The ocean lab demo: on a Debian 12 machine, as root, from a fresh clone:
#   install what is needed, build the image once, bring up the emulated China-US network,
#   measure the untuned baseline across each WAN link, apply playbooks/site.yml, measure again,
#   and print a before/after table (also written to results/demo-<timestamp>/).
#
# Usage: sudo lab/demo.sh [--keep-lab] [--duration SECONDS]
#   --keep-lab   reuse a lab that is already up as it is (by default a running lab is rebuilt so
#                that the baseline really is untuned: Debian defaults, CUBIC, MTU 1500)
#   --duration   iperf3 seconds per link (default 10)
# The lab stays up afterwards so you can explore it; tear it down with: python3 lab/lab.py down
set -euo pipefail

keep_lab=false
duration=10
while (($#)); do
  case "$1" in
    --keep-lab) keep_lab=true ;;
    --duration) duration="${2:?--duration needs a number of seconds}"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ $EUID -ne 0 ]]; then
  echo "demo: run as root (network namespaces, TUN devices and privileged containers): sudo $0" >&2
  exit 1
fi

step() { printf '\n=== %s\n' "$*"; }

step "1/6 bootstrap: packages, virtualenv, base image (quick when already done)"
# Sourcing exports PATH (.venv first), CONTAINERS_CONF and ANSIBLE_CONFIG for the steps below.
# shellcheck source=../scripts/bootstrap.sh
source scripts/bootstrap.sh

lab() { python3 lab/lab.py "$@"; }
results="results/demo-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$results"

step "2/6 lab up (3 sites, 8 containers, one WAN emulator; inventories/lab is the source of truth)"
if lab status >/dev/null 2>&1 || [[ -e /run/trainnet-lab/trainnet-lab/state.json ]]; then
  if $keep_lab; then
    echo "a lab is already up; --keep-lab: measuring it as it is (it may already be tuned)"
  else
    echo "a lab is already up; rebuilding it so the baseline starts from untuned hosts"
    echo "(use --keep-lab to keep it as it is)"
    lab down
  fi
fi
lab up

step "3/6 baseline: ping + ${duration} s iperf3 across each WAN link, one link at a time"
lab measure --label before --duration "$duration" --output "$results/before.json"

step "4/6 ansible-playbook -i inventories/lab playbooks/site.yml"
if [[ -f playbooks/site.yml ]]; then
  if ! ansible-playbook -i inventories/lab playbooks/site.yml 2>&1 | tee "$results/site.log"; then
    echo "demo: site.yml failed (log: $results/site.log); the lab is still up for a look" >&2
    exit 1
  fi
else
  echo "playbooks/site.yml does not exist yet: SKIPPING the tuning step" \
       "(the 'after' figures will equal the baseline)" | tee "$results/site.log"
fi

step "5/6 after: the same measurements on the tuned hosts"
lab measure --label after --duration "$duration" --output "$results/after.json"

step "6/6 before/after per WAN link"
lab compare "$results/before.json" "$results/after.json" \
  --markdown "$results/summary.md" --json "$results/summary.json"
lab status > "$results/lab-status.txt" 2>&1 || true

cat <<EOF

Results: $results/ (before.json, after.json, summary.md, summary.json, site.log, lab-status.txt)
The lab is still up. Explore it:
  python3 lab/lab.py status
  podman exec -it trainnet-lab-cn-gpu1 bash          # hosts are containers named trainnet-lab-<host>
  ansible -i inventories/lab all -m ping
Tear it down (removes every namespace, container, TUN and the emulator):
  python3 lab/lab.py down
EOF
