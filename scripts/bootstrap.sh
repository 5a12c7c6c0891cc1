#!/usr/bin/env bash
# Install everything the demo and the tests need on a Debian 12 host, idempotently:
# system packages, a pinned virtualenv (.venv), the collection link that lets Ansible resolve
# longhaul.trainnet.* from this checkout (and Python import it in .venv), the lab and benchmark
# packages installed editable in .venv, and the locally built base image.
# Usage: source scripts/bootstrap.sh   (or run it; sourcing also exports PATH/CONTAINERS_CONF)
set -euo pipefail

TRAINNET_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export TRAINNET_ROOT

APT_PACKAGES=(podman runc debootstrap iperf3 nftables iproute2 iputils-ping wireguard-tools
              wireguard-go python3-venv rsync git procps util-linux)

bootstrap_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "bootstrap: installing ${missing[*]}"
    apt-get update -qq || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || return 1
  fi
}

bootstrap_venv() {
  local venv="$TRAINNET_ROOT/.venv" stamp want
  want="$(sha256sum "$TRAINNET_ROOT/requirements-dev.txt" | cut -c1-16)"
  stamp="$venv/.trainnet-requirements"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  echo "bootstrap: creating $venv"
  python3 -m venv "$venv" || return 1
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$TRAINNET_ROOT/requirements-dev.txt" \
    >"$venv/pip-install.log" 2>&1 || { tail -20 "$venv/pip-install.log" >&2; return 1; }
  echo "$want" > "$stamp"
}

bootstrap_collection_link() {
  # ansible.cfg points collections_path at .collections; ansible-test gets its own copy.
  local dir="$TRAINNET_ROOT/.collections/ansible_collections/longhaul"
  mkdir -p "$dir" || return 1
  [[ -L "$dir/trainnet" ]] || ln -sfn ../../.. "$dir/trainnet"
}

bootstrap_python_paths() {
  # .venv's Python imports the collection as ansible_collections.longhaul.trainnet (a .pth line
  # naming .collections) and the lab and benchmark packages of pyproject.toml (an editable
  # install), so neither code nor tests edit sys.path or PYTHONPATH.
  local venv="$TRAINNET_ROOT/.venv" site pth stamp want
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
  pth="$site/trainnet-collections.pth"
  if [[ ! -f "$pth" || "$(cat "$pth")" != "$TRAINNET_ROOT/.collections" ]]; then
    echo "bootstrap: linking the collection into $venv ($pth)"
    echo "$TRAINNET_ROOT/.collections" > "$pth" || return 1
  fi
  stamp="$venv/.trainnet-packages"
  want="$(sha256sum "$TRAINNET_ROOT/pyproject.toml" | cut -c1-16) $TRAINNET_ROOT"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  echo "bootstrap: installing trainnet_lab and trainnet_bench into $venv (editable)"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$TRAINNET_ROOT" \
    >"$venv/pip-editable.log" 2>&1 || { tail -20 "$venv/pip-editable.log" >&2; return 1; }
  # setuptools leaves its build metadata in the checkout; the venv keeps its own copy.
  rm -rf "$TRAINNET_ROOT"/*.egg-info
  echo "$want" > "$stamp"
}

bootstrap_lab_torch() {
  # PyTorch for the lab's training nodes and anchors (the CPU build, pinned as in requirements-dev):
  # installed once on the host and bind-mounted read-only into every lab container at
  # /opt/trainnet-torch (lab.py), instead of 0.9 GB installed into each of them.
  local dir=/var/lib/trainnet-lab/torch want
  want="$(grep -E '^torch==' "$TRAINNET_ROOT/requirements-dev.txt")"
  if [[ -f "$dir/.trainnet-torch" && "$(cat "$dir/.trainnet-torch")" == "$want" ]]; then
    return 0
  fi
  echo "bootstrap: installing $want for the lab containers into $dir"
  rm -rf "$dir.new" && mkdir -p "$dir.new" || return 1
  "$TRAINNET_ROOT/.venv/bin/pip" install -q --disable-pip-version-check --target "$dir.new" "$want" \
    >"$TRAINNET_ROOT/.venv/pip-lab-torch.log" 2>&1 || { tail -20 "$TRAINNET_ROOT/.venv/pip-lab-torch.log" >&2; return 1; }
  echo "$want" > "$dir.new/.trainnet-torch"
  rm -rf "$dir" && mv "$dir.new" "$dir"
}

main() {
  if [[ $EUID -ne 0 ]]; then
    echo "bootstrap: run as root (podman with --privileged, network namespaces and apt need it)" >&2
    return 1
  fi
  # Explicit checks: a caller's `source ... ||` would switch set -e off in here.
  bootstrap_apt || return 1
  bootstrap_venv || return 1
  bootstrap_collection_link || return 1
  bootstrap_python_paths || return 1
  bootstrap_lab_torch || return 1
  export CONTAINERS_CONF="$TRAINNET_ROOT/lab/containers.conf"
  bash "$TRAINNET_ROOT/lab/image/build-image.sh" || return 1
}

if ! main "$@"; then
  echo "bootstrap: failed" >&2
  return 1 2>/dev/null || exit 1
fi
export PATH="$TRAINNET_ROOT/.venv/bin:$PATH"
export CONTAINERS_CONF="$TRAINNET_ROOT/lab/containers.conf"
export ANSIBLE_CONFIG="$TRAINNET_ROOT/ansible.cfg"
