#!/usr/bin/env bash
# Build the offline images (mqbed/rabbitmq, mqbed/activemq, mqbed/prometheus, mqbed/mqbed) from
# Debian packages with mmdebstrap | docker import; skipped when an image with the same content
# hash exists. Usage: deploy/images/build.sh [--list] [--docker-host URL] [NAME ...]
# Needs root (mmdebstrap --mode=root), mmdebstrap, and a Docker engine ($DOCKER_HOST).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${PYTHON:-$here/.venv/bin/python}"
[ -x "$python" ] || python=python3
cd "$here"
exec "$python" -m testbed.backends.images "$@"
