# syntax=docker/dockerfile:1
# Two images from one file:
#   --target api     slim: FastAPI + SQLAlchemy + Celery producer; no torch, no TensorFlow
#   --target worker  the Celery worker with CUDA builds of PyTorch and TensorFlow
ARG PYTHON=3.11

FROM python:${PYTHON}-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /srv/epochal
RUN useradd --create-home --uid 10001 epochal && mkdir -p /data && chown epochal /data
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY migrations ./migrations
COPY worker ./worker

FROM base AS api
RUN pip install .
USER epochal
ENV EPOCHAL_HOME=/data EPOCHAL_HOST=0.0.0.0
EXPOSE 8000
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["epochal", "api", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]

FROM base AS worker
# CUDA 12.8 wheels of the same versions the CPU build pins; the host needs the NVIDIA driver and
# the NVIDIA container toolkit (see DEPLOY notes in README).
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128 \
 && pip install "tensorflow[and-cuda]==2.21.0" scikit-learn setproctitle \
 && pip install .
USER epochal
ENV EPOCHAL_HOME=/data TF_FORCE_GPU_ALLOW_GROWTH=true
CMD ["epochal", "worker"]
