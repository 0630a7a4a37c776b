#!/bin/bash
# Installs what tests/hosts/slurm_test.sh needs: Debian's Slurm controller, compute daemon,
# client commands and munge (about 10 s with --no-install-recommends). Safe to run again.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in slurmctld slurmd slurm-client munge; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
