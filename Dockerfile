# The Tower worker image (also runs `tower` commands and the search-attribute setup).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY tower tower
COPY workflows workflows
COPY activities activities
COPY starter starter
COPY worker.py ./
RUN pip install . && useradd --create-home tower && mkdir -p /data && chown tower /data
USER tower
# `docker stop` sends STOPSIGNAL, then SIGKILL after the grace period (docker-compose.yml:
# stop_grace_period 30s): the worker drains on SIGTERM within TOWER_SHUTDOWN_GRACE and exits 0.
STOPSIGNAL SIGTERM
ENV TOWER_SHUTDOWN_GRACE=20
CMD ["python", "worker.py"]
