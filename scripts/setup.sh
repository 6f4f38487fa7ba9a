#!/usr/bin/env bash
# Installs every Debian package libdsm needs and, as root, reserves hugepages.
# Idempotent: re-running it changes nothing that is already in place.
set -euo pipefail

PACKAGES=(
  build-essential pkg-config meson ninja-build
  dpdk libdpdk-dev libnuma-dev libxxhash-dev xxhash libipsec-mb-dev libssl-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev
  clang libclang-rt-14-dev
  libopenblas-dev zlib1g-dev dataset-fashion-mnist
  iproute2 procps gnuplot-nox
  python3-dev pybind11-dev python3-pybind11 python3-mesonpy python3-numpy python3-torch
  python3-pytest patchelf
)

need=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done

if ((${#need[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "setup.sh: missing packages: ${need[*]}" >&2
    echo "setup.sh: run as root (sudo scripts/setup.sh) to install them" >&2
    exit 1
  fi
  echo "setup.sh: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# Hugepages are optional: dsmd falls back to memfd backing without them.
HUGEPAGES_WANTED=${DSM_HUGEPAGES:-64}
if [[ $EUID -ne 0 ]]; then
  echo "setup.sh: not root; skipping hugepage reservation (dsmd will use memfd backing)"
elif [[ ! -w /proc/sys/vm/nr_hugepages ]]; then
  echo "setup.sh: /proc/sys/vm/nr_hugepages not writable; skipping hugepages (memfd backing)"
else
  have=$(cat /proc/sys/vm/nr_hugepages)
  if ((have < HUGEPAGES_WANTED)); then
    echo "$HUGEPAGES_WANTED" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
  fi
  mkdir -p /dev/hugepages
  if ! mountpoint -q /dev/hugepages; then
    mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null \
      || echo "setup.sh: could not mount hugetlbfs on /dev/hugepages; memfd backing will be used"
  fi
  echo "setup.sh: hugepages reserved: $(cat /proc/sys/vm/nr_hugepages)"
fi
echo "setup.sh: done"
