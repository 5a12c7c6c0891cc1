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

# Lanes of gates side by side. Each argument is one lane: gates separated by " ; ", each gate
# "name command args...", run one after another in that lane, each to its own log. Once every lane
# has ended, the logs are shown lane by lane and counted as gates.
lanes_side_by_side() {
  local lane spec pids=()
  for lane in "$@"; do
    (
      IFS=';' read -r -a specs <<<"$lane"
      for spec in "${specs[@]}"; do
        read -r -a argv <<<"$spec"
        start=$SECONDS
        "${argv[@]:1}" >"$log_dir/${argv[0]}.log" 2>&1
        echo "$? $((SECONDS - start))" >"$log_dir/${argv[0]}.status"
      done
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for lane in "$@"; do
    IFS=';' read -r -a specs <<<"$lane"
    for spec in "${specs[@]}"; do
      read -r -a argv <<<"$spec"
      local name="${argv[0]}" rc=1 seconds=0
      read -r rc seconds <"$log_dir/$name.status" || true
      echo "=== gate: $name (side by side)"
      cat "$log_dir/$name.log"
      if ((rc == 0)); then
        passed=$((passed + 1)); echo "=== gate $name: PASSED in $seconds s"
      else
        failed=$((failed + 1)); failed_names+=("$name"); echo "=== gate $name: FAILED in $seconds s"
      fi
    done
  done
}

# The gates that need no containers share nothing: side by side.
lanes_side_by_side "ansible-lint ansible-lint --offline" \
  "sanity bash scripts/sanity.sh" \
  "unit python -m pytest -q -p no:cacheprovider tests/unit"
# The molecule scenarios each have their own instances, bridge namespace and podman network: two
# lanes of about equal length (most of their time is spent waiting on podman exec, not CPU).
lanes_side_by_side \
  "molecule-control-plane molecule test -s control_plane ; molecule-sync-tunnel molecule test -s sync_tunnel ; molecule-bad-input molecule test -s bad_input" \
  "molecule-egress-pool molecule test -s egress_pool ; molecule-training-job molecule test -s training_job ; molecule-default molecule test -s default"
# Lab and benchmark tests skip where no lab can be built; here a skip counts as a failure.
# (`python -m` puts the checkout on sys.path, which makes tests/no_skips_plugin.py loadable.)
lab_pytest=(python -m pytest -q -p no:cacheprovider -p tests.no_skips_plugin)
gate lab "${lab_pytest[@]}" --durations=15 tests/lab
# Benchmark pipeline: pure-logic tests and the smoke run (one profile, one repetition).
gate benchmarks-smoke "${lab_pytest[@]}" tests/benchmarks

echo
echo "logs: $log_dir"
((failed)) && echo "failed gates: ${failed_names[*]}"
echo "gates: $passed passed, $failed failed"
((failed == 0))
