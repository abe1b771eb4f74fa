# syntax=docker/dockerfile:1
# The component image: every pipeline stage runs on it, on Vertex AI (CPU stages and Cloud TPU VM custom jobs).
#   TensorFlow 2.15 built for Cloud TPU VMs + libtpu, tensorflow-estimator 2.15, kfp 2.13, this package.
# Build and push with an immutable tag, then compile against it (docs/pipeline.md):
#   docker build -t REPO:$(git rev-parse HEAD) . && docker push REPO:$(git rev-parse HEAD)
#   tpu-pipeline compile --image-repo REPO        # or --image REPO@sha256:<digest printed by docker push>
#
# The TPU build of TensorFlow 2.15 is published for Python 3.10 only, hence the base image. Check the wheel and
# the matching libtpu on Cloud TPU's "supported TPU configurations" page before changing either.
ARG PYTHON_IMAGE=python:3.10-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG TF_TPU_WHEEL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/tf-2.15.0/tensorflow-2.15.0-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
ARG LIBTPU_URL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/1.9.0/libtpu.so
ARG UID=1000

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_CPP_MIN_LOG_LEVEL=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*

# TensorFlow for TPU VMs, and libtpu where TensorFlow looks for it (/lib/libtpu.so).
RUN pip install "${TF_TPU_WHEEL}" \
 && curl -fsSL --retry 3 -o /lib/libtpu.so "${LIBTPU_URL}" \
 && chmod 0755 /lib/libtpu.so

# The package's own dependencies, pinned as in pyproject.toml, except tensorflow-cpu: the TPU build installed
# above is this image's TensorFlow, so the package itself is installed without dependencies.
RUN pip install "tensorflow-estimator==2.15.0" "protobuf>=4.21,<5" "kfp>=2.13,<2.14" \
        "google-cloud-storage>=2.14,<4" "numpy>=1.23.5,<2" "orjson>=3.10,<4" \
        "google-cloud-aiplatform>=1.60,<2" "google-cloud-pipeline-components>=2.20.1,<2.23"

WORKDIR /opt/tpu-pipeline
COPY pyproject.toml README.md ./
COPY estimator_lib ./estimator_lib
COPY components ./components
COPY pipelines ./pipelines
RUN pip install --no-deps . \
 && python -c "import tensorflow as tf, tensorflow_estimator, kfp; import components, estimator_lib.estimator, estimator_lib.predict; \
assert tf.__version__.startswith('2.15'), tf.__version__; assert kfp.__version__.startswith('2.13'), kfp.__version__"

# Run as an unprivileged user. KFP writes the component's code under /tmp and outputs through Vertex AI's
# /gcs mount or gs:// directly, so no root is needed for the pipeline itself.
RUN useradd --create-home --uid "${UID}" --shell /usr/sbin/nologin pipeline
USER pipeline
WORKDIR /home/pipeline
