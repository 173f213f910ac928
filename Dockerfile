# The Tower worker image (also runs `tower setup`, `tower codec-server` and other commands).
# No `temporal` CLI inside: it is a development extra (`pip install 'tower[dev]'`).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY tower tower
COPY workflows workflows
COPY activities activities
COPY starter starter
COPY worker.py ./
# The payload store and the tools' data must be writable by the user the image runs as: a
# named volume mounted on either starts with these directories' owner.
RUN pip install . && useradd --create-home tower \
    && mkdir -p /data /app/.tower/payloads && chown -R tower /data /app/.tower
USER tower
# `docker stop` sends STOPSIGNAL, then SIGKILL after the grace period (docker-compose.yml:
# stop_grace_period 30s): the worker drains on SIGTERM within TOWER_SHUTDOWN_GRACE and exits 0.
STOPSIGNAL SIGTERM
ENV TOWER_SHUTDOWN_GRACE=20
CMD ["python", "worker.py"]
