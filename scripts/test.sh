#!/usr/bin/env bash
# Runs every gate: ansible-lint (production), ansible-test sanity, unit tests, the molecule
# scenarios (check, converge, idempotence, verify), the lab fidelity and link_measure accuracy
# tests, and the benchmark smoke run.
# Installs what it needs first (scripts/bootstrap.sh). Ends with "gates: N passed, N failed".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Installs first (a failure stops here), then sources it again for PATH and the podman config.
bash scripts/bootstrap.sh || { echo "bootstrap failed"; echo "gates: 0 passed, 1 failed"; exit 1; }
# shellcheck source=scripts/bootstrap.sh
source scripts/bootstrap.sh >/dev/null
set +e

# The demo leaves its lab up. The gates need the machine to themselves: the molecule scenarios
# change a global kernel list a lab's hosts would see change, the lab tests build their own lab,
# and a running lab's emulator and daemons slow every timed gate. Take it down first.
if ip netns list 2>/dev/null | grep -q '^trainnet-lab'; then
  echo "=== an ocean lab is up (the demo leaves it running): taking it down before the gates"
  python3 lab/lab.py down || { echo "lab down failed"; echo "gates: 0 passed, 1 failed"; exit 1; }
fi

passed=0
failed=0
failed_names=()
log_dir="results/test-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$log_dir"

gate() {
  local name="$1"; shift
  local start=$SECONDS
  echo "=== gate: $name"
  if "$@" 2>&1 | tee "$log_dir/$name.log"; then
    passed=$((passed + 1)); echo "=== gate $name: PASSED in $((SECONDS - start)) s"
  else
    failed=$((failed + 1)); failed_names+=("$name"); echo "=== gate $name: FAILED in $((SECONDS - start)) s"
  fi
}

# The three gates that need no containers run side by side (they share nothing), each to its own
# log, shown in order once all have finished; the rest run one at a time (they share podman and the lab).
# The unit tests, the longest of the three, keep both cores once the other two are done: two workers,
# each test file on one of them (a file's fixtures stay in one process; ports are ephemeral).
gates_side_by_side() {
  local specs=("$@") pids=() names=() starts=() i=0
  for spec in "${specs[@]}"; do
    read -r -a argv <<<"$spec"
    names+=("${argv[0]}"); starts+=("$SECONDS")
    "${argv[@]:1}" >"$log_dir/${argv[0]}.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    echo "=== gate: ${names[$i]} (side by side)"
    cat "$log_dir/${names[$i]}.log"
    if ((rc == 0)); then
      passed=$((passed + 1)); echo "=== gate ${names[$i]}: PASSED in $((SECONDS - starts[i])) s"
    else
      failed=$((failed + 1)); failed_names+=("${names[$i]}"); echo "=== gate ${names[$i]}: FAILED in $((SECONDS - starts[i])) s"
    fi
  done
}

gates_side_by_side "ansible-lint ansible-lint --offline" \
  "sanity bash scripts/sanity.sh" \
  "unit python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile tests/unit"
# The molecule scenarios one at a time: they are CPU-bound (podman exec, Ansible), so two side by
# side on two cores took as long as one after the other (measured), with timing tests squeezed.
gate molecule-default molecule test -s default
gate molecule-bad-input molecule test -s bad_input
gate molecule-control-plane molecule test -s control_plane
gate molecule-sync-tunnel molecule test -s sync_tunnel
gate molecule-egress-pool molecule test -s egress_pool
gate molecule-training-job molecule test -s training_job
# Lab and benchmark tests skip where no lab can be built; here a skip counts as a failure.
# (`python -m` puts the checkout on sys.path, which makes tests/no_skips_plugin.py loadable.)
lab_pytest=(python -m pytest -q -p no:cacheprovider -p tests.no_skips_plugin)
# Tests marked benchmark (published figures, not behaviour) run in benchmarks/lab_figures.sh instead.
gate lab "${lab_pytest[@]}" --durations=15 -m "not benchmark" tests/lab
# Benchmark pipeline: pure-logic tests and the smoke run (one profile, one repetition).
gate benchmarks-smoke "${lab_pytest[@]}" tests/benchmarks

# CI keeps only the end of this output: repeat what each failed gate said about its failure here.
for name in "${failed_names[@]}"; do
  echo
  echo "=== why $name failed (from $log_dir/$name.log)"
  grep -E 'FAILED|fatal:|failed=[1-9]|Error|assert|Traceback|UNREACHABLE|Timeout' "$log_dir/$name.log" | tail -n 40
  echo "--- last lines"
  tail -n 60 "$log_dir/$name.log"
done

echo
echo "logs: $log_dir"
((failed)) && echo "failed gates: ${failed_names[*]}"
echo "gates: $passed passed, $failed failed"
((failed == 0))
