"""The host's apt sources as mirror lines for mmdebstrap (offline image builds).

No registry is reachable here, but the Debian mirror apt uses is: `apt_mirrors` turns the
host's configuration (``sources.list`` and ``sources.list.d/*.list|*.sources``, the files apt
reads) into ``deb URI SUITE COMPONENTS`` lines for one suite and its ``-updates`` /
``-security`` companions.
"""

from __future__ import annotations

__all__ = ["apt_mirrors", "os_codename"]

import os
import re
from collections.abc import Iterable
from pathlib import Path

from testbed.exceptions import BackendError


def os_codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "bookworm"
    match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", text, re.M)
    return match.group(1) if match else "bookworm"


def _deb822_stanzas(text: str) -> Iterable[dict[str, str]]:
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields:
            yield fields


def apt_mirrors(suite: str | None = None, etc_apt: Path = Path("/etc/apt")) -> list[str]:
    """One-line ``deb URI SUITE COMPONENTS`` entries for `suite` from the host's apt sources.

    Reads ``sources.list`` and ``sources.list.d/*.list|*.sources`` (the files apt reads; a
    ``*.disabled`` file is ignored, like apt does), keeps enabled ``deb`` entries whose suite
    is `suite` or ``suite-*`` (updates, security). ``$MQBED_DEBIAN_MIRROR`` (a URI) overrides.
    """
    suite = suite or os_codename()
    override = os.environ.get("MQBED_DEBIAN_MIRROR")
    if override:
        return [f"deb {override} {suite} main"]
    entries: list[str] = []
    files = [etc_apt / "sources.list"]
    listdir = etc_apt / "sources.list.d"
    if listdir.is_dir():
        files += sorted(p for p in listdir.iterdir() if p.suffix in (".list", ".sources"))
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            for st in _deb822_stanzas(text):
                if (
                    st.get("enabled", "yes").lower() == "no"
                    or "deb" not in st.get("types", "").split()
                ):
                    continue
                for uri in st.get("uris", "").split():
                    for s in st.get("suites", "").split():
                        if s == suite or s.startswith(f"{suite}-"):
                            entries.append(f"deb {uri} {s} {st.get('components', 'main')}")
            continue
        for raw in text.splitlines():
            line = re.sub(r"\[[^\]]*\]", "", raw.split("#", 1)[0]).split()
            if len(line) >= 3 and line[0] == "deb":
                s = line[2]
                if s == suite or s.startswith(f"{suite}-"):
                    entries.append(" ".join(["deb", line[1], s, *(line[3:] or ["main"])]))
    if not entries:
        raise BackendError(
            f"no apt source for Debian {suite!r} in {etc_apt}/sources.list(.d); "
            "set MQBED_DEBIAN_MIRROR to a Debian mirror URI"
        )
    return list(dict.fromkeys(entries))
