"""The offline images mqbed builds, and what goes into each one (`testbed.backends.images`).

An `ImageSpec` names one image — ``mqbed/rabbitmq``, ``mqbed/activemq``, ``mqbed/prometheus``,
``mqbed/mqbed`` — with its Debian package list (``deploy/images/<name>.packages``, checked as
it is read), its ``docker import --change`` settings (environment, entry point, command), the
paths its ``dpkg`` leaves out, whether it gets mqbed's Python dependencies in `MQBED_VENV`, and
the further files whose content changes it; `image_specs` is the catalogue of the four. How an
image is hashed, built, tagged and pruned is `testbed.backends.images`.
"""

from __future__ import annotations

__all__ = [
    "IMAGES_DIR",
    "IMAGE_NAMES",
    "MQBED_VENV",
    "REPO",
    "REPOSITORY_PREFIX",
    "ImageSpec",
    "image_specs",
]

import re
from dataclasses import dataclass, field
from pathlib import Path

from testbed.exceptions import ConfigurationError

REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO / "deploy" / "images"
REPOSITORY_PREFIX = "mqbed"
IMAGE_NAMES = ("rabbitmq", "activemq", "prometheus", "mqbed")
MQBED_VENV = "/opt/mqbed-venv"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageSpec:
    """One offline image: Debian packages plus Dockerfile-style settings for ``docker import``."""

    name: str
    changes: tuple[str, ...] = ()
    """``docker import --change`` instructions (ENV, CMD, ENTRYPOINT, WORKDIR, LABEL)."""
    python_venv: bool = False
    """Install mqbed's Python dependencies into `MQBED_VENV` (the ``mqbed/mqbed`` image)."""
    extra_inputs: tuple[Path, ...] = field(default_factory=tuple)
    """Files whose content changes the image (hashed with the package list)."""
    dpkg_excludes: tuple[str, ...] = ()
    """Extra ``path-exclude`` patterns: big files of dependencies the image never uses."""

    @property
    def repository(self) -> str:
        return f"{REPOSITORY_PREFIX}/{self.name}"

    @property
    def packages_file(self) -> Path:
        return IMAGES_DIR / f"{self.name}.packages"

    def packages(self) -> list[str]:
        """Package names from ``deploy/images/<name>.packages`` (``#`` comments allowed)."""
        try:
            text = self.packages_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"{self.packages_file}: cannot read: {exc}") from exc
        names: list[str] = []
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if not re.fullmatch(r"[a-z0-9][a-z0-9+.\-]*", line):
                raise ConfigurationError(
                    f"{self.packages_file}:{lineno}: {line!r} is not a Debian package name"
                )
            names.append(line)
        if not names:
            raise ConfigurationError(f"{self.packages_file}: no packages listed")
        return names


def image_specs() -> dict[str, ImageSpec]:
    """The four offline images, by short name."""
    lang = "ENV LANG=C.UTF-8"
    return {
        "rabbitmq": ImageSpec(
            "rabbitmq",
            changes=(
                f"ENV PATH=/usr/lib/rabbitmq/bin:{_PATH}",
                lang,
                'CMD ["/usr/lib/rabbitmq/bin/rabbitmq-server"]',
            ),
        ),
        "activemq": ImageSpec(
            "activemq",
            changes=(
                f"ENV PATH={_PATH}",
                lang,
                "ENV ACTIVEMQ_HOME=/usr/share/activemq",
            ),
        ),
        "prometheus": ImageSpec(
            "prometheus",
            changes=(
                f"ENV PATH={_PATH}",
                lang,
                'ENTRYPOINT ["/usr/bin/prometheus"]',
                'CMD ["--config.file=/etc/prometheus/prometheus.yml", '
                '"--web.listen-address=127.0.0.1:9090"]',
            ),
            # 218 MB of time-zone data for the classic web UI's graphs; the API needs none
            dpkg_excludes=("/usr/share/javascript/moment-timezone/*",),
        ),
        "mqbed": ImageSpec(
            "mqbed",
            changes=(
                f"ENV PATH={MQBED_VENV}/bin:{_PATH}",
                lang,
                "ENV PYTHONPATH=/mqbed",
                "ENV PYTHONUNBUFFERED=1",
                "WORKDIR /mqbed",
                'ENTRYPOINT ["python", "-m", "testbed.cli"]',
                'CMD ["--help"]',
            ),
            python_venv=True,
            extra_inputs=(REPO / "constraints.txt",),
        ),
    }
