# mqbed/mqbed:compose — the mqbed image for compose/docker-compose.yml with official images
# (a registry must be reachable). Offline, testbed.backends.images builds mqbed/mqbed from Debian
# packages instead and compose/docker-compose.offline.yml mounts the source.
# Build context: the repository root (compose does that: build.context is "..").
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /mqbed
COPY pyproject.toml constraints.txt README.md ./
COPY testbed testbed
COPY emulator emulator
COPY workloads workloads
COPY deploy deploy
RUN pip install --no-cache-dir -c constraints.txt -e . \
 && mkdir -p /mqbed/runs
ENTRYPOINT ["mqbed"]
CMD ["--help"]
