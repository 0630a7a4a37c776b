#!/usr/bin/env bash
# Installs everything gyre needs to build and test on Debian 12, from Debian's packages only.
# Safe to run again; uses sudo when not root.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format
  libasio-dev libprotobuf-dev protobuf-compiler libgflags-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  iproute2 procps
  python3-dev pybind11-dev python3-numpy python3-torch libtorch-dev python3-yaml
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
