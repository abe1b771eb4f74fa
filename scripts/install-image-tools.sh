#!/usr/bin/env bash
# Installs what building and running the component image without a Docker engine needs: buildah (builds and runs
# images, no daemon) and debootstrap (a Debian base image from Debian's package mirror, for --base local). Used by
# CI before scripts/test.sh; the image test (tests/test_image.py) is skipped, saying so, where they are missing.
# Debian/Ubuntu only; needs root. Does nothing when both are installed.
set -euo pipefail
missing=()
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  echo "install-image-tools: ${missing[*]} missing; install them as root with your package manager" \
    "(Debian/Ubuntu: apt-get install -y ${missing[*]})" >&2
  exit 1
fi
echo "install-image-tools: apt-get install ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
