# syntax=docker/dockerfile:1
# Two images from one file, both installing the same two wheels (tests/packaging installs them
# the same way, in fresh virtualenvs):
#   --target api     slim: FastAPI + SQLAlchemy + Celery producer; no torch, no TensorFlow
#   --target worker  the Celery worker with CUDA builds of PyTorch and TensorFlow
ARG PYTHON=3.11

# epochal-client (the `epochal` command) and epochal (app, worker and the migrations).
FROM python:${PYTHON}-slim AS wheels
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY client ./client
COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
COPY migrations ./migrations
RUN pip wheel --no-deps -w /wheels ./client .

# No source tree in the images: every command, `epochal migrate` included, runs from the
# installed packages.
FROM python:${PYTHON}-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /srv/epochal
RUN useradd --create-home --uid 10001 epochal && mkdir -p /data && chown epochal /data
COPY --from=wheels /wheels /wheels

FROM base AS api
RUN pip install /wheels/*.whl
USER epochal
ENV EPOCHAL_HOME=/data EPOCHAL_HOST=0.0.0.0
EXPOSE 8000
# Every 5 s, not Docker's default 30 s: `depends_on: service_healthy` and `up` wait on it.
HEALTHCHECK --interval=5s --timeout=5s --retries=3 CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["epochal", "api", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]

FROM base AS worker
# Three environments, each installed in one pip step from requirements/ (so no step replaces
# what another pinned; tests/packaging/test_worker_image.py resolves each as this does): the
# worker's own (Celery and the supervisor: no framework), and one per framework for its
# training processes, since PyTorch's CUDA 13 libraries and TensorFlow's CUDA 12 ones write
# files at the same paths (cuDNN, NCCL). Both from the package index; the host needs an NVIDIA
# driver for CUDA 13 and the NVIDIA container toolkit (DEPLOY.md).
# DEVICE=cpu (docker-compose.cpu.yml) builds the frameworks for a box without a GPU instead:
# PyTorch's CPU wheel from TORCH_CPU_INDEX (the package index's torch is the CUDA build, several
# GB) and tensorflow-cpu. WHEELS, a folder in the build context, holds wheels that pip prefers
# to the indexes' (a CPU torch wheel for a box that cannot reach TORCH_CPU_INDEX; empty, that
# index is not asked at all).
ARG DEVICE=cuda
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
ARG WHEELS=requirements/wheels
COPY ${WHEELS}/ /wheels/
COPY requirements/worker*.txt /tmp/requirements/
# The device is chosen in shell words around the pip steps, which read the same for both.
RUN pip install --find-links /wheels -r /tmp/requirements/worker.txt \
 && if [ "$DEVICE" = cpu ]; then \
      cp /tmp/requirements/worker-tensorflow-cpu.txt /tmp/requirements/worker-tensorflow.txt; \
      [ -z "$TORCH_CPU_INDEX" ] || export PIP_EXTRA_INDEX_URL="$TORCH_CPU_INDEX"; \
    fi \
 && python -m venv /opt/pytorch \
 && /opt/pytorch/bin/pip install --find-links /wheels -r /tmp/requirements/worker-pytorch.txt \
 && unset PIP_EXTRA_INDEX_URL \
 && python -m venv /opt/tensorflow \
 && /opt/tensorflow/bin/pip install --find-links /wheels -r /tmp/requirements/worker-tensorflow.txt \
 && rm -r /tmp/requirements
USER epochal
ENV EPOCHAL_HOME=/data TF_FORCE_GPU_ALLOW_GROWTH=true \
    EPOCHAL_PYTORCH_PYTHON=/opt/pytorch/bin/python EPOCHAL_TENSORFLOW_PYTHON=/opt/tensorflow/bin/python
CMD ["epochal", "worker"]
