#!/usr/bin/env bash
# Issue 23 acceptance on the lab (as root): site.yml with one bad value per role (argument spec) and
# bad cross-field combinations (the roles' preflight rules) fails in the preflight play with a one- or two-line message naming the
# variable, the host and the allowed values, and no host changes (a snapshot of every lab host
# before and after: files under /etc and /var/lib/trainnet, nftables, addresses, routes, units).
# A lab that is up (deployed by site.yml: the meaningful snapshot) is used and left up; otherwise a
# fresh one is brought up and down (about 8 min).
# Usage: bash tests/acceptance/bad_role_inputs_on_lab.sh   (logs under results/acceptance-inputs-<time>/)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/bootstrap.sh >/dev/null
set +e   # bootstrap.sh turns errexit on; this script compares outcomes, failures included
export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
fails=0
out="results/acceptance-inputs-$(date +%Y%m%d-%H%M%S)"; mkdir -p "$out"
if python3 lab/lab.py status 2>/dev/null | grep -q '^lab trainnet-lab: up'; then
  echo "using the lab that is up"
else
  trap 'python3 lab/lab.py down >/dev/null 2>&1' EXIT
  python3 lab/lab.py up > "$out/up.log" 2>&1 || { echo "lab up failed"; tail "$out/up.log"; exit 1; }
fi
hosts="$(podman ps --format '{{.Names}}' | grep '^trainnet-lab-' | sort)"
# What a role run changes: files under /etc (content), what the roles recorded as loaded, the
# nftables ruleset (without counters), addresses, routes and the units' load/active states. Not what
# services change on their own timers (the watchdogs' runs, metrics, the egress pool's drain state).
snap() {
  for c in $hosts; do
    echo "=== $c"
    podman exec "$c" sh -c 'find /etc /var/lib/trainnet/config-loaded -xdev -type f -newer /etc/hostname -exec md5sum {} + 2>/dev/null | sort -k2;
      nft list ruleset 2>/dev/null | sed -E "s/counter packets [0-9]+ bytes [0-9]+/counter/"; ip -o addr; ip route show table all;
      systemctl list-units --all --no-legend --plain "trainnet*" 2>/dev/null | grep -v watchdog | awk "{print \$1, \$2, \$3}"' \
      | grep -v ' /etc/ld.so.cache$'
  done
}
snap > "$out/before.txt"
bad() {
  local role="$1" value="$2" expect="$3"
  local start=$SECONDS
  local log="$out/$role-${value%%=*}.log"
  ansible-playbook -i inventories/lab playbooks/site.yml -e "$value" > "$log" 2>&1
  local rc=$?
  # The play that failed, and how many hosts a later play reached (must be none).
  local later; later="$(grep -c -E '^PLAY \[(Build|Tune|Prepare)' "$log")"
  local msg; msg="$(grep -o "longhaul.trainnet.$role[ a-z]* on [^\"]*" "$log" | head -1)"
  if ((rc == 0)) || ((later > 0)) || [[ "$msg" != *"$expect"* ]]; then
    fails=$((fails + 1)); echo "FAIL $role ($value): rc=$rc, later plays=$later, message: $msg"
  else
    echo "ok   $role ($value), $((SECONDS - start)) s: $msg"
  fi
}
bad control_plane control_plane_bfd_multiplier=three "control_plane_bfd_multiplier = 'three' is not of type int"
bad sync_tunnel sync_tunnel_manage_packages=perhaps "sync_tunnel_manage_packages = 'perhaps' is not of type bool"
bad data_plane data_plane_mtu=big "data_plane_mtu = 'big' is not of type int"
bad egress_pool egress_pool_mode=multihome "egress_pool_mode = 'multihome' is not one of: proxy, multihomed"
bad training_job training_job_sync_topology=ring "training_job_sync_topology = 'ring' is not one of: site, site-ring, flat"
# Cross-field rules and ranges (each role's preflight.yml asserts)
bad control_plane control_plane_master_port=29400 "control_plane_master_port and control_plane_rdzv_port must differ"
bad control_plane control_plane_rdzv_port=80 "control_plane_rdzv_port=80 is outside the allowed range 1024-65535"
snap > "$out/after.txt"
if diff -u "$out/before.txt" "$out/after.txt" > "$out/snapshot.diff"; then
  echo "snapshot of $(echo "$hosts" | wc -w) hosts: identical ($(wc -l < "$out/before.txt") lines)"
else
  fails=$((fails + 1)); echo "snapshot: DIFFERS"; head -40 "$out/snapshot.diff"
fi
echo "acceptance: $fails failure(s) (logs: $out)"
((fails == 0))
