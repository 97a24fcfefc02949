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
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["epochal", "api", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]

FROM base AS worker
# CUDA 12.8 wheels of the same versions the CPU build pins (torch==2.13.0 accepts 2.13.0+cu128,
# so the [torch] extra keeps it); the host needs the NVIDIA driver and the NVIDIA container
# toolkit (see DEPLOY.md).
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128 \
 && pip install "tensorflow[and-cuda]==2.21.0" \
 && pip install /wheels/epochal_client-*.whl "$(echo /wheels/epochal-*.whl)[torch,data,export]" setproctitle
USER epochal
ENV EPOCHAL_HOME=/data TF_FORCE_GPU_ALLOW_GROWTH=true
CMD ["epochal", "worker"]
