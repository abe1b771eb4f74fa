# The component image: every pipeline stage runs on it, on Vertex AI (CPU stages and Cloud TPU VM custom jobs).
#   A Python venv in /opt/venv with TensorFlow 2.15 (the Cloud TPU VM build + libtpu by default, or tensorflow-cpu),
#   tensorflow-estimator 2.15, kfp 2.13, google-cloud-aiplatform, google-cloud-pipeline-components and this
#   package; it runs as the unprivileged user `pipeline` (uid 1000). No compilers, no pip cache, no apt lists.
#
# Build it with scripts/build-image.sh (Docker where an engine runs, else buildah; docs/image.md):
#   bash scripts/build-image.sh                                  # TPU image (default build arguments)
#   bash scripts/build-image.sh --variant cpu --base local       # CPU image on a Debian base made by debootstrap
# or by hand (BuildKit, for RUN --mount):  DOCKER_BUILDKIT=1 docker build -t REPO:$(git rev-parse HEAD) .
#
# Build arguments:
#   BASE_IMAGE        any image with Python 3.9-3.11 and the venv module. The TPU build of TensorFlow 2.15 is
#                     published for Python 3.10 only, hence the default.
#   TENSORFLOW_BUILD  tpu: the TF_TPU_VERSION wheel for Cloud TPU VMs and libtpu LIBTPU_VERSION in /lib/libtpu.so;
#                     cpu: TF_CPU_REQUIREMENT from the package index (no libtpu).
#   TF_TPU_VERSION, LIBTPU_VERSION: a pair from TPU_RUNTIMES in pipelines/image.py (Cloud TPU's supported
#                     configurations); the build fails if the installed versions do not match that table.
#                     TF_TPU_WHEEL and LIBTPU_URL are derived from them (override them for a mirror only).
#   BEAM_SDK_IMAGE    Apache Beam's Python SDK image of the installed Beam version and the base's Python: its worker
#                     boot program (/opt/apache/beam/boot, the image's ENTRYPOINT) makes this image Dataflow's worker
#                     container for `--engine beam` (docs/scale.md). BEAM_SDK_IMAGE=BASE_IMAGE builds without it
#                     (the image then launches Dataflow jobs but cannot be their workers' container).
#
# Build secrets (optional; scripts/build-image.sh passes the host's): pip_ca, a CA bundle pip and the libtpu download
# trust; pip_conf, a pip.conf with the index settings. They are mounted for the build steps only, never stored in
# the image. Downloaded wheels are kept on a build cache mount (id tpu-pipeline-wheelhouse), outside the image.
ARG BASE_IMAGE=python:3.10-slim-bookworm
ARG BEAM_SDK_IMAGE=apache/beam_python3.10_sdk:2.72.0

# -- Beam's worker boot program, from the SDK image of the same Beam version (a folder in every case) --------------
FROM ${BEAM_SDK_IMAGE} AS beam-sdk
RUN mkdir -p /opt/apache/beam

# -- the package as a wheel, built in a throwaway stage (its sources and build files stay out of the image) -------
FROM ${BASE_IMAGE} AS wheel
COPY pyproject.toml README.md /src/
COPY estimator_lib /src/estimator_lib
COPY components /src/components
COPY pipelines /src/pipelines
RUN --mount=type=secret,id=pip_ca --mount=type=secret,id=pip_conf \
    set -eu; export PIP_CONFIG_FILE=/run/secrets/pip_conf PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1; \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi; \
    python3 -m venv /tmp/build-venv; \
    /tmp/build-venv/bin/pip wheel --no-deps --wheel-dir /wheels /src

# -- the image ------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
ARG TENSORFLOW_BUILD=tpu
ARG TF_TPU_VERSION=2.15.0
ARG LIBTPU_VERSION=1.9.0
ARG TF_TPU_WHEEL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/tf-${TF_TPU_VERSION}/tensorflow-${TF_TPU_VERSION}-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
ARG LIBTPU_URL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/${LIBTPU_VERSION}/libtpu.so
ARG TF_CPU_REQUIREMENT="tensorflow-cpu>=2.15.1,<2.16"
ARG UID=1000

LABEL org.opencontainers.image.title="tpu-estimator-pipelines" \
      tpu-pipeline.tensorflow-build="${TENSORFLOW_BUILD}"

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_CPP_MIN_LOG_LEVEL=1

# A current pip first: the one bookworm's venv brings (23.0) backtracks for over 5 minutes over Beam's [gcp]
# dependencies, where 25.3+ resolves them in seconds. Then TensorFlow, and the package's own dependencies pinned as
# in pyproject.toml (tests/test_dockerfile.py keeps them equal). The package itself is installed below without
# dependencies: its tensorflow-cpu requirement would otherwise pull a second TensorFlow into the TPU image. Wheels
# (and libtpu) are kept in a wheelhouse on a build cache mount, outside the image: a rebuild installs from it
# offline and downloads only what it lacks.
RUN --mount=type=secret,id=pip_ca --mount=type=secret,id=pip_conf \
    --mount=type=cache,id=tpu-pipeline-wheelhouse,target=/wheelhouse \
    set -eu; export PIP_CONFIG_FILE=/run/secrets/pip_conf; \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca SSL_CERT_FILE=/run/secrets/pip_ca; fi; \
    case "$TENSORFLOW_BUILD" in \
      tpu) tensorflow="$TF_TPU_WHEEL" installed_as="tensorflow==$TF_TPU_VERSION" ;; \
      cpu) tensorflow="$TF_CPU_REQUIREMENT" installed_as="$TF_CPU_REQUIREMENT" ;; \
      *) echo "TENSORFLOW_BUILD=$TENSORFLOW_BUILD is not a TensorFlow build; use tpu or cpu" >&2; exit 2 ;; \
    esac; \
    set -- "tensorflow-estimator==2.15.0" "protobuf>=4.21,<5" "kfp>=2.13,<2.14" \
        "google-cloud-storage>=2.14,<4" "numpy>=1.23.5,<2" "orjson>=3.10,<4" \
        "google-cloud-aiplatform>=1.60,<2" "google-cloud-pipeline-components>=2.22,<2.23" \
        "matplotlib>=3.8,<4" "google-crc32c>=1.5,<2" "pyarrow>=14.0.1,<26" "apache-beam[gcp]>=2.72,<2.73"; \
    python3 -m venv "$VIRTUAL_ENV"; \
    pip=pip\>=25.3,\<27; \
    if ! pip install --no-index --find-links /wheelhouse "$pip" 2>/dev/null; then \
      pip download --dest /wheelhouse "$pip"; pip install --no-index --find-links /wheelhouse "$pip"; \
    fi; \
    if ! pip install --no-index --find-links /wheelhouse "$installed_as" "$@" 2>/dev/null; then \
      pip wheel --wheel-dir /wheelhouse "$tensorflow" "$@"; \
      pip install --no-index --find-links /wheelhouse "$installed_as" "$@"; \
    fi; \
    if [ "$TENSORFLOW_BUILD" = tpu ]; then \
      libtpu="/wheelhouse/libtpu-$LIBTPU_VERSION.so"; \
      [ -s "$libtpu" ] || python3 -c 'import os, sys, urllib.request as u; u.urlretrieve(sys.argv[1], sys.argv[2] + ".part"); \
os.replace(sys.argv[2] + ".part", sys.argv[2])' "$LIBTPU_URL" "$libtpu"; \
      install -m 0755 "$libtpu" /lib/libtpu.so; \
    fi

# The package, then checks: the modules with native dependencies import, the TensorFlow, estimator and libtpu
# versions match (pipelines/image.py TPU_RUNTIMES), pip sees no conflict; then the unprivileged user.
# (COPY, not a bind mount from the stage: buildah 1.28 cannot bind-mount a cached stage.)
COPY --from=wheel /wheels /tmp/wheels
COPY --from=beam-sdk /opt/apache/beam /opt/apache/beam
ARG BASE_IMAGE
ARG BEAM_SDK_IMAGE
RUN set -eu; pip install --no-deps /tmp/wheels/*.whl; \
    if [ -x /opt/apache/beam/boot ]; then echo "Dataflow worker boot: /opt/apache/beam/boot from $BEAM_SDK_IMAGE"; \
    elif [ "$BEAM_SDK_IMAGE" = "$BASE_IMAGE" ]; then echo "no Beam worker boot (BEAM_SDK_IMAGE=BASE_IMAGE)"; \
    else echo "BEAM_SDK_IMAGE=$BEAM_SDK_IMAGE has no /opt/apache/beam/boot; give Beam's Python SDK image" >&2; exit 1; fi; \
    python -c "import os, importlib.metadata as m, tensorflow as tf, components, estimator_lib.estimator, \
estimator_lib.predict, google_cloud_pipeline_components, apache_beam; from pipelines.image import LIBTPU_PATH, check_runtime; \
found = ('${TENSORFLOW_BUILD}', tf.__version__, m.version('tensorflow-estimator'), \
'${LIBTPU_VERSION}' if os.path.exists(LIBTPU_PATH) else None); check_runtime(*found); print('runtime', found)"; \
    conflicts=$(pip check | grep -v -e '^No broken requirements' -e ' requires tensorflow-cpu, which is not installed' || true); \
    if [ -n "$conflicts" ]; then echo "pip check: $conflicts" >&2; exit 1; fi; \
    useradd --create-home --uid "${UID}" --shell /usr/sbin/nologin pipeline; \
    rm -rf /root/.cache /tmp/* /var/lib/apt/lists/*

# KFP writes the component's code under /tmp and outputs through Vertex AI's /gcs mount or gs:// directly, so the
# pipeline itself needs no root.
USER pipeline
WORKDIR /home/pipeline

# Dataflow starts its workers through the image's entrypoint, Beam's boot program. Vertex AI and KFP give every
# stage its own command, which replaces the entrypoint; to run something else by hand: docker run --entrypoint ...
ENTRYPOINT ["/opt/apache/beam/boot"]

# The image's own reference (scripts/build-image.sh passes its tag, REPO:<git commit>): each stage records it in
# its manifest as the code it ran (estimator_lib/manifest.py). Last, so a new tag rebuilds no other layer.
ARG IMAGE_REF=""
ENV TPU_PIPELINE_IMAGE=${IMAGE_REF}
