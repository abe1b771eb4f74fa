#!/usr/bin/env bash
# Builds the component image (Dockerfile) with Docker where an engine runs, else with buildah (no daemon).
#
#   bash scripts/build-image.sh [--variant tpu|cpu] [--base IMAGE|local] [--tag REF] [--engine docker|buildah]
#                               [--push] [-- EXTRA BUILD ARGUMENTS]
#
#   --variant tpu   TensorFlow 2.15 for Cloud TPU VMs + libtpu (default; base python:3.10-slim-bookworm)
#   --variant cpu   tensorflow-cpu from the package index (base python:3.11-slim-bookworm)
#   --base local    a Debian bookworm base made here with debootstrap (Debian's Python 3.11; no image registry
#                   needed; cpu only: the TPU wheel is for Python 3.10). Cached under the cache directory below.
#   --beam-sdk IMAGE|none
#                   Beam's Python SDK image whose worker boot program makes the image Dataflow's worker container
#                   (--engine beam): default apache/beam_pythonX.Y_sdk:<the dataflow extra's Beam> for the
#                   variant's Python; none (the default with --base local: no registry) builds without it.
#   --tag REF       default REPO:<git commit> (REPO: $TPU_PIPELINE_IMAGE_REPO or tpu-pipeline; tpu-pipeline-cpu
#                   for --variant cpu), the commit tag `tpu-pipeline compile --image-repo REPO` expects.
#   --push          push REF after the build.
# Arguments after -- go to `docker build` / `buildah build` (e.g. --build-arg LIBTPU_VERSION=...).
#
# The host's pip index settings and CA bundle reach the build as build secrets (never stored in the image); the
# wheels it downloads are kept in a wheelhouse on a build cache mount, outside the image. Cache directory (the
# Debian base, buildah's cache mounts): $TPU_PIPELINE_IMAGE_CACHE, default ~/.cache/tpu-pipeline-image.
# buildah keeps its own settings: STORAGE_DRIVER (e.g. vfs where overlay mounts are not allowed),
# CONTAINERS_STORAGE_CONF. Details: docs/image.md.
set -euo pipefail
cd "$(dirname "$0")/.."

variant=tpu base="" tag="" engine="" push=false beam_sdk=""
extra=()
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "build-image: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant=${2:?--variant needs tpu or cpu}; shift 2 ;;
    --base) base=${2:?--base needs an image or local}; shift 2 ;;
    --tag) tag=${2:?--tag needs an image reference}; shift 2 ;;
    --beam-sdk) beam_sdk=${2:?--beam-sdk needs an image or none}; shift 2 ;;
    --engine) engine=${2:?--engine needs docker or buildah}; shift 2 ;;
    --push) push=true; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
done

cache=${TPU_PIPELINE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpu-pipeline-image}
mkdir -p "$cache"

# -- what to build ---------------------------------------------------------------------------------------------
case "$variant" in
  tpu) default_base=python:3.10-slim-bookworm repo_suffix="" python=3.10 ;;
  cpu) default_base=python:3.11-slim-bookworm repo_suffix=-cpu python=3.11 ;;
  *) die "--variant $variant: use tpu or cpu" ;;
esac
base=${base:-$default_base}
if [ "$base" = local ] && [ "$variant" = tpu ]; then
  die "--base local is Debian bookworm with Python 3.11, but the TPU TensorFlow 2.15 wheel is for Python 3.10 only; \
use --variant cpu, or a Python 3.10 base (the default $default_base)"
fi
if [ -z "$tag" ]; then
  commit=$(git rev-parse HEAD 2>/dev/null) || die "not a git checkout: pass --tag REF"
  tag="${TPU_PIPELINE_IMAGE_REPO:-tpu-pipeline}${repo_suffix}:${commit}"
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "build-image: warning: the work tree has uncommitted changes; $tag does not name them" >&2
  fi
fi

if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then engine=docker
  elif command -v buildah >/dev/null 2>&1; then engine=buildah
  else die "neither a running Docker engine nor buildah was found; install buildah (Debian/Ubuntu: apt-get install \
buildah; scripts/install-image-tools.sh) or start Docker"
  fi
fi
case "$engine" in
  docker) build=(env DOCKER_BUILDKIT=1 docker build) ;;
  buildah) build=(env "TMPDIR=$cache/buildah-tmp" buildah build --isolation chroot --layers); mkdir -p "$cache/buildah-tmp" ;;
  *) die "--engine $engine: use docker or buildah" ;;
esac

# -- the host's pip settings, as build secrets ---------------------------------------------------------------------
secrets=$(mktemp -d)
trap 'rm -rf "$secrets"' EXIT
python3 - "$secrets" <<'PY'
"""Writes pip.conf (the host pip's index settings, local file:// indexes and find-links dropped: the build cannot
see them) and ca.pem (the CA bundle the host's pip trusts, if it names one) into the directory argv[1]."""
import os, shutil, subprocess, sys

out = sys.argv[1]
listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
settings = {}
for line in listed.splitlines():  # "global.index-url='...'", ":env:.cert='...'": the environment wins
    key, _, value = line.partition("=")
    scope, _, name = key.rpartition(".")
    if scope == ":env:" or name not in settings:
        settings[name] = value.strip("'\"")
conf = ["[global]"]
for name in ("index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout", "retries", "proxy"):
    value = " ".join(v for v in settings.get(name, "").split() if not v.startswith("file:"))
    if value:
        conf.append(f"{name} = {value}")
with open(os.path.join(out, "pip.conf"), "w") as f:
    f.write("\n".join(conf) + "\n")
ca = settings.get("cert") or os.environ.get("SSL_CERT_FILE") or os.environ.get("REQUESTS_CA_BUNDLE")
if ca and os.path.isfile(ca):
    shutil.copyfile(ca, os.path.join(out, "ca.pem"))
else:
    open(os.path.join(out, "ca.pem"), "w").close()  # empty: the build keeps pip's own CA bundle
PY
chmod -R go-rwx "$secrets"

# -- a Debian base made here (--base local) ----------------------------------------------------------------------
image_exists() {
  if [ "$engine" = docker ]; then docker image inspect "$1" >/dev/null 2>&1; else buildah inspect --type image "$1" >/dev/null 2>&1; fi
}
local_base() {
  local suite=bookworm mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  local packages=python3,python3-venv,ca-certificates
  local key; key=$(printf '%s %s %s' "$suite" "$mirror" "$packages" | sha256sum | cut -c1-12)
  local tarball="$cache/base/debian-$suite-$key.tar" ref="localhost/tpu-pipeline-base:$suite-$key"
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null 2>&1 || die "--base local needs debootstrap (apt-get install debootstrap)"
    [ "$(id -u)" -eq 0 ] || die "--base local runs debootstrap, which needs root"
    local rootfs="$cache/base/rootfs-$key.partial"
    rm -rf "$rootfs"; mkdir -p "$rootfs"
    echo "build-image: debootstrap $suite ($packages) from $mirror" >&2
    debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$cache/base/debootstrap.log" 2>&1 \
      || die "debootstrap failed; see $cache/base/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" --numeric-owner -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    rm -rf "$rootfs"
  fi
  if ! image_exists "$ref"; then
    if [ "$engine" = docker ]; then
      docker import --change 'CMD ["/bin/bash"]' "$tarball" "$ref" >/dev/null
    else
      local ctr; ctr=$(buildah from scratch)
      buildah add --quiet "$ctr" "$tarball" / >/dev/null
      buildah config --cmd /bin/bash "$ctr"
      buildah commit --quiet --rm "$ctr" "$ref" >/dev/null
    fi
  fi
  echo "$ref"
}

# Beam's SDK image for the worker boot program: the version the dataflow extra pins (apache-beam[gcp]>=X.Y,<...).
if [ -z "$beam_sdk" ]; then
  if [ "$base" = local ]; then beam_sdk=none
  else
    beam=$(sed -n 's/^dataflow = \["apache-beam\[gcp\]>=\([0-9]*\.[0-9]*\),.*/\1/p' pyproject.toml)
    [ -n "$beam" ] || die "pyproject.toml has no dataflow extra of the form apache-beam[gcp]>=X.Y,<...; pass --beam-sdk"
    beam_sdk="apache/beam_python${python}_sdk:${beam}.0"
  fi
fi

if [ "$base" = local ]; then
  base=$(local_base)
fi
if [ "$beam_sdk" = none ]; then
  beam_sdk=$base
  echo "build-image: note: no Beam worker boot program (--beam-sdk none): the image runs every stage and launches \
Dataflow jobs, but cannot be the Dataflow workers' container" >&2
fi

# -- build ---------------------------------------------------------------------------------------------------------
echo "build-image: building $tag ($variant, base $base, Beam boot from $beam_sdk) with $engine" >&2
start=$(date +%s)
"${build[@]}" \
  --build-arg "BASE_IMAGE=$base" --build-arg "TENSORFLOW_BUILD=$variant" --build-arg "IMAGE_REF=$tag" \
  --build-arg "BEAM_SDK_IMAGE=$beam_sdk" \
  --secret "id=pip_ca,src=$secrets/ca.pem" --secret "id=pip_conf,src=$secrets/pip.conf" \
  --tag "$tag" "${extra[@]}" .
seconds=$(( $(date +%s) - start ))
if [ "$engine" = docker ]; then
  size="$(( $(docker image inspect --format '{{.Size}}' "$tag") / 1000000 )) MB"
else
  size=$(buildah images --format '{{.Size}}' "$tag")
fi
echo "build-image: built $tag in ${seconds}s, $size"
if $push; then
  "$engine" push "$tag"
fi
