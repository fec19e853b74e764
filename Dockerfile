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
# gcc only for the install: it builds the optional compiled frame cut
# (herdbook/events/_frames.c, a rebuild of the view ~15 % faster), then leaves the image.
COPY pyproject.toml setup.py ./
COPY herdbook ./herdbook
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir . \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* /src

# Non-root user; /data is owned by it so empty named volumes mounted there inherit that.
RUN useradd --create-home --uid 10001 herd \
    && mkdir -p /data \
    && chown herd:herd /data
USER herd
WORKDIR /data

ENTRYPOINT ["herd"]
CMD ["--help"]
