# herdbook: one image for the control plane (`herd up`) and the agents (`herd agent`).
#   docker build -t herdbook .
#   docker run --rm herdbook --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the build needs: the repo has no .dockerignore, and copying `.` would also
# bring in a host .venv, .git and caches.
WORKDIR /src
COPY pyproject.toml ./
COPY herdbook ./herdbook
RUN pip install --no-cache-dir . && rm -rf /src

# Non-root user; /data is owned by it so empty named volumes mounted there inherit that.
RUN useradd --create-home --uid 10001 herd \
    && mkdir -p /data \
    && chown herd:herd /data
USER herd
WORKDIR /data

ENTRYPOINT ["herd"]
CMD ["--help"]
