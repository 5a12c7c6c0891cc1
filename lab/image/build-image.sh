#!/usr/bin/env bash
# Build the Debian 12 + systemd base image used by the ocean lab and the molecule scenarios.
# No container registry is reachable, so the image is debootstrapped locally and imported.
# Idempotent: the image is rebuilt only when this recipe changes (tracked by a label).
set -euo pipefail

IMAGE="${TRAINNET_IMAGE:-localhost/trainnet-debian12:latest}"
MIRROR="${TRAINNET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$HERE/../containers.conf}"

# Everything a lab host or a molecule instance needs at run time: systemd as PID 1, python3 for
# Ansible, and the real network tools the roles drive (iperf3, nftables, WireGuard, BIRD 2 for
# the control plane's BFD-checked routes, squid; aria2 and nginx-light for the egress pool: the
# loaders' downloader and the lab object store; rsync for the training job's checkpoint manifests).
PACKAGES=(
  systemd systemd-sysv dbus sudo python3 python3-apt iproute2 iputils-ping iputils-tracepath procps kmod
  nftables iperf3 wireguard-tools wireguard-go bird2 netcat-openbsd curl ca-certificates
  squid prometheus-node-exporter aria2 nginx-light rsync
)

recipe="$( (cat "${BASH_SOURCE[0]}"; printf '%s\n' "${PACKAGES[@]}") | sha256sum | cut -c1-16)"
if podman image exists "$IMAGE"; then
  have="$(podman image inspect --format '{{ index .Labels "trainnet.recipe" }}' "$IMAGE" 2>/dev/null || true)"
  if [[ "$have" == "$recipe" ]]; then
    echo "image $IMAGE is up to date (recipe $recipe)"
    exit 0
  fi
  echo "image $IMAGE has recipe '${have:-none}', want $recipe: rebuilding"
fi

rootfs="$(mktemp -d /var/tmp/trainnet-rootfs.XXXXXX)"
trap 'rm -rf --one-file-system "$rootfs"' EXIT
include="$(IFS=,; echo "${PACKAGES[*]}")"
echo "debootstrapping Debian 12 into $rootfs (a minute or two) ..."
debootstrap --variant=minbase --include="$include" bookworm "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 || {
  tail -30 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"

# Services the image ships but a test host must not start on its own: the roles enable what they use.
for unit in squid.service prometheus-node-exporter.service nftables.service bird.service nginx.service \
            systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer; do
  rm -f "$rootfs"/etc/systemd/system/*.wants/"$unit"
done
# Containers have no consoles or udev to manage; masking keeps boot clean and fast.
for unit in getty@tty1.service console-getty.service systemd-udevd.service systemd-udev-trigger.service \
            systemd-remount-fs.service sys-kernel-debug.mount; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
echo "trainnet" > "$rootfs/etc/hostname"

tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL trainnet.recipe=$recipe" \
  - "$IMAGE" >/dev/null
echo "built $IMAGE (recipe $recipe)"
