#!/usr/bin/env bash
# Trust acceptance on the lab (as root; brings the lab up and down, about 8 min): each bad input,
# through the role and through the module ad hoc, is refused and leaves every host as it was (a
# snapshot before and after); --check on a drifted host predicts what the real run reports.
# Usage: bash tests/acceptance/bad_inputs_on_lab.sh   (logs under results/acceptance-<time>/)
# Exits non-zero when any of that does not hold.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/bootstrap.sh >/dev/null
fails=0
set +e   # bootstrap.sh turns errexit on; this script compares outcomes, failures included
export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
out="results/acceptance-$(date +%Y%m%d-%H%M%S)"; mkdir -p "$out"
trap 'python3 lab/lab.py down >/dev/null 2>&1' EXIT
python3 lab/lab.py up > $out/up.log 2>&1 || { echo "lab up failed"; tail $out/up.log; exit 1; }
inv="-i inventories/lab"
ansible-playbook $inv playbooks/site.yml > $out/site1.log 2>&1; echo "site.yml first run rc=$? $(grep -A12 'PLAY RECAP' $out/site1.log | grep -c 'failed=0')/8 hosts failed=0"
ansible-playbook $inv playbooks/site.yml > $out/site2.log 2>&1; echo "site.yml second run rc=$?; changed per host: $(grep -A12 'PLAY RECAP' $out/site2.log | grep -o 'changed=[0-9]*' | sort | uniq -c | tr '\n' ' ')"
snap() { for h in cn-gpu1 usw-gpu1; do podman exec trainnet-lab-$h sh -c "sysctl -a --pattern '^net\.(ipv4|core)' 2>/dev/null | grep -v nf_conntrack_count; ip -o link; ls -la --time-style=full-iso /etc/sysctl.d /etc/trainnet /etc/modules-load.d 2>&1; cat /etc/sysctl.d/*trainnet* /etc/trainnet/*"; done; }
snap > $out/before.txt
role() { local name="$1"; shift; ansible-playbook $inv playbooks/site.yml -l cn-gpu1,usw-gpu1 -e trainnet_data_plane_hosts=cn-gpu1,usw-gpu1 "$@" > $out/role-$name.log 2>&1; local rc=$?; ((rc != 0)) || fails=$((fails + 1)); echo "role  $name: rc=$rc: $(grep -o '"msg": "[^"]*' $out/role-$name.log | tail -1 | cut -c1-230)"; }
adhoc() { local name="$1" mod="$2" args="$3"; ansible $inv cn-gpu1 -m longhaul.trainnet.$mod -a "$args" > $out/adhoc-$name.log 2>&1; local rc=$?; ((rc != 0)) || fails=$((fails + 1)); echo "adhoc $name: rc=$rc: $(grep -m1 -o '"msg": .*' $out/adhoc-$name.log | cut -c1-230)"; }
role mtu-1500-on-1400-path -e data_plane_mtu=1500
sleep 70   # hosts whose path carries 1500 restore 1400 by their rollback timer (60 s) when the play stopped before confirming
role buffer-abc -e '{"data_plane_sysctl_extra": {"net.ipv4.tcp_notsent_lowat": "abc"}}'
role require-bogus -e '{"trainnet_validate_require": ["bogus"]}'
role missing-interface -e data_plane_interface=nosuch0
role misspelt-key -e '{"data_plane_sysctl_extra": {"net.ipv4.tcp_rmen": "4096 131072 67108864"}}'
role unknown-cc -e data_plane_congestion_control=htcp
role misspelt-variable -e '{"data_plane_mtu_verfy_hosts": ["198.18.2.11"]}'
adhoc mtu-1500-on-1400-path interface_link '{"name": "eth0", "mtu": 1500, "rollback_seconds": 30, "verify_peers": ["198.18.2.11"]}'
adhoc buffer-abc sysctl_profile '{"path": "/etc/sysctl.d/91-adhoc.conf", "settings": {"net.ipv4.tcp_notsent_lowat": "abc"}}'
adhoc require-bogus kernel_capability '{"require": ["bogus"]}'
adhoc missing-interface interface_link '{"name": "nosuch0", "mtu": 1400}'
adhoc misspelt-key sysctl_profile '{"path": "/etc/sysctl.d/91-adhoc.conf", "settings": {"net.ipv4.tcp_rmen": "4096 131072 67108864"}}'
adhoc unknown-cc sysctl_profile '{"path": "/etc/sysctl.d/91-adhoc.conf", "settings": {"net.ipv4.tcp_congestion_control": "htcp"}}'
sleep 35   # let any rollback timer armed by the ad-hoc MTU attempt expire
snap > $out/after.txt
if diff -u $out/before.txt $out/after.txt > $out/snapshot.diff; then echo "snapshot: identical ($(wc -l < $out/before.txt) lines)"; else echo "snapshot: DIFFERS"; fails=$((fails + 1)); head -40 $out/snapshot.diff; fi
# --check on a drifted host predicts exactly what the real run reports
podman exec trainnet-lab-cn-gpu1 sh -c 'sysctl -qw net.ipv4.tcp_fastopen=1 net.ipv4.tcp_slow_start_after_idle=1; ip link set eth0 mtu 1500'
ansible-playbook $inv playbooks/site.yml -l cn-gpu1 -e trainnet_data_plane_hosts=cn-gpu1 --check --diff > $out/check.log 2>&1; echo "check rc=$?"
ansible-playbook $inv playbooks/site.yml -l cn-gpu1 -e trainnet_data_plane_hosts=cn-gpu1 --diff > $out/real.log 2>&1; echo "real rc=$?"
changed() { awk '/^TASK \[/{t=$0} /^changed: /{print t}' "$1"; }
changed $out/check.log > $out/check.changed; changed $out/real.log > $out/real.changed
if diff $out/check.changed $out/real.changed > /dev/null; then echo "check predicted the real run: $(wc -l < $out/real.changed) changed tasks, the same list"; cat $out/real.changed; else echo "check vs real DIFFER"; fails=$((fails + 1)); diff $out/check.changed $out/real.changed; fi
echo "acceptance: $fails failure(s)"
((fails == 0))
