#!/usr/bin/env bash
# The ocean lab demo: on a Debian 12 machine, as root, from a fresh clone:
#   install what is needed, build the image once, bring up the emulated China-US network,
#   measure the untuned baseline across each WAN link with playbooks/measure.yml, apply
#   playbooks/site.yml, measure again (with the baseline) and print a before/after table per link
#   (also written to results/demo-<timestamp>/), then run a PyTorch job across the three sites
#   (playbooks/train.yml: an all-reduce check on every rank, then DDP steps with checkpoints).
#
# Usage: sudo lab/demo.sh [--keep-lab] [--duration SECONDS]
#   --keep-lab   reuse a lab that is already up as it is (by default a running lab is rebuilt so
#                that the baseline really is untuned: Debian defaults, CUBIC, MTU 1500)
#   --duration   iperf3 seconds per link (default 10)
# The tables are rendered by the collection's report filters (plugins/filter/link_report.py).
# The lab stays up afterwards so you can explore it; tear it down with: python3 lab/lab.py down
set -euo pipefail

keep_lab=false
duration=10
while (($#)); do
  case "$1" in
    --keep-lab) keep_lab=true ;;
    --duration) duration="${2:?--duration needs a number of seconds}"; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
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

# Each step says when it started (minutes:seconds since the demo began): where a slow machine spends them.
step() { printf '\n=== %s (at %d:%02d)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "1/7 bootstrap: packages, virtualenv, base image (quick when already done)"
# Sourcing exports PATH (.venv first), CONTAINERS_CONF and ANSIBLE_CONFIG for the steps below.
# shellcheck source=../scripts/bootstrap.sh
source scripts/bootstrap.sh

lab() { python3 lab/lab.py "$@"; }
results="results/demo-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$results"

step "2/7 lab up (3 sites, 13 containers, one WAN emulator; inventories/lab is the source of truth)"
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

# measure.yml with one gpu_nodes pair per WAN link (no master -> anchor pairs), results under
# $results/<label>/measure-<time>/ (results.json, report.md, report.html; compare.md after).
# Its exit status is non-zero when a pair failed; that is a finding, not a reason to stop, as long
# as results.json was written. Prints the path of results.json.
measure() {
  local label="$1"; shift
  local rc=0 json
  ansible-playbook -i inventories/lab playbooks/measure.yml \
    -e measure_results_dir="$ROOT/$results/$label" -e measure_anchor_pairs=false \
    -e measure_duration="$duration" "$@" > "$results/measure-$label.log" 2>&1 || rc=$?
  json="$(ls -1d "$results/$label"/measure-*/results.json 2>/dev/null | tail -1 || true)"
  if [[ -z "$json" ]]; then
    tail -30 "$results/measure-$label.log" >&2
    echo "demo: measure.yml ($label) wrote no results.json (exit $rc; log: $results/measure-$label.log)" >&2
    exit 1
  fi
  python3 - "$json" "$rc" <<'PY' >&2
import json, sys
pairs = json.load(open(sys.argv[1]))["pairs"]
failed = [p for p in pairs if p.get("status") != "ok"]
print(f"measure.yml: {len(pairs)} pairs, {len(failed)} failed (exit {sys.argv[2]})")
for p in failed:
    print(f"  FAILED {p['source']} -> {p['peer']}: {p['msg']}")
PY
  echo "$json"
}

step "3/7 baseline: playbooks/measure.yml (ping, path MTU, TFO, ${duration} s iperf3), one link at a time"
before_json="$(measure before)"

step "4/7 ansible-playbook -i inventories/lab playbooks/site.yml"
if ! ansible-playbook -i inventories/lab playbooks/site.yml 2>&1 | tee "$results/site.log"; then
  echo "demo: site.yml failed (log: $results/site.log); the lab is still up for a look" >&2
  exit 1
fi

step "5/7 after: the same measurements on the tuned hosts (baseline: the before run)"
after_json="$(measure after -e measure_baseline="$ROOT/$before_json")"

step "6/7 before/after per WAN link (longhaul.trainnet.link_report_compare_markdown)"
cp "$before_json" "$results/before.json"
cp "$after_json" "$results/after.json"
cp "$(dirname "$after_json")/report.html" "$results/report.html"
# measure.yml wrote compare.md with the collection's filter; it is the summary
cp "$(dirname "$after_json")/compare.md" "$results/summary.md"
cat "$results/summary.md"

step "7/7 a training job across the three sites: playbooks/train.yml (verify, then DDP steps)"
# PyTorch DDP over Gloo on the four training nodes, rendezvous at the control plane's address: first
# every rank checks an all-reduce sum, then a short training run with checkpoints on the US nodes.
for mode in verify train; do
  if ! ansible-playbook -i inventories/lab playbooks/train.yml -e training_job_mode="$mode" \
      -e training_job_run_id="demo-$mode-$(date -u +%Y%m%dT%H%M%SZ)" \
      -e training_job_results_dir="$ROOT/$results/train" > "$results/train-$mode.log" 2>&1; then
    tail -30 "$results/train-$mode.log" >&2
    echo "demo: train.yml ($mode) failed (log: $results/train-$mode.log)" >&2
    exit 1
  fi
done
python3 - "$results/train" <<'PY'
import sys
from pathlib import Path
from trainnet_bench import training
for run_dir in sorted(Path(sys.argv[1]).iterdir()):
    print(f"{run_dir.name}:")
    for line in training.summary_lines(training.summarize(training.run_events(run_dir))):
        print(f"  {line}")
PY
lab status > "$results/lab-status.txt" 2>&1 || true

cat <<EOF

Demo done in $((SECONDS / 60)) min $((SECONDS % 60)) s.
Results: $results/ (summary.md, before.json, after.json, report.html: before/after charts,
  before/ and after/: each measure.yml run with its logs and reports, site.log, lab-status.txt,
  train/: each node's logs of the training runs)
The lab is still up. Explore it:
  python3 lab/lab.py status
  podman exec -it trainnet-lab-cn-gpu1 bash          # hosts are containers named trainnet-lab-<host>
  ansible -i inventories/lab all -m ping
Tear it down (removes every namespace, container, TUN and the emulator):
  python3 lab/lab.py down
EOF
