"""Live-side checks of a scenario's faults before a run (the plan itself is
`testbed.core.faultplan`, shared with the simulator).

- `check_faults`: every reason a scenario's faults cannot run live, for run start-up;
- `needs_proxy`: whether clients must connect through the fault proxy (`testbed.core.faultplan`,
  the rule the simulator follows too);
- `links_for`: the proxy links of a fault side.
"""

from __future__ import annotations

__all__ = ["check_faults", "links_for", "needs_proxy"]

from collections.abc import Mapping, Sequence
from typing import Any

from testbed.core.faultplan import is_broker_fault, needs_proxy
from testbed.faults.injector import supported


def links_for(side: str, links: Mapping[str, Sequence[str]]) -> list[str]:
    """Proxy link names of a fault side; ``all`` = the ``all`` entry or producers + consumers."""
    if side in links:
        return list(links[side])
    if side == "all":
        names = [*links.get("producers", ()), *links.get("consumers", ())]
        return list(dict.fromkeys(names))
    return []


def check_faults(
    faults: Sequence[Any],
    *,
    broker_kind: str,
    backend: str = "local",
    node_names: Mapping[str, str] | None = None,
    links: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """Every reason the live runner could not execute `faults` (empty: all fine), each naming
    ``faults[i]``. `node_names`: scenario target → node; `links`: side → proxy link names
    (None: no proxy)."""
    problems: list[str] = []
    for i, f in enumerate(faults):
        where = f"faults[{i}] ({f.kind})"
        reason = supported(f, broker_kind, backend)
        if reason:
            problems.append(f"{where}: {reason}")
        known = node_names
        if (
            known is not None
            and is_broker_fault(f.kind, str(getattr(f, "target", "")), known)
            and f.target not in known
        ):
            problems.append(
                f"{where}: target {f.target!r} is not a broker node (known: {sorted(known)})"
            )
        side = getattr(f, "side", None)
        if side is None:
            continue
        if links is None:
            problems.append(f"{where}: network faults need the fault proxy (no links given)")
        elif not links_for(side, links):
            problems.append(f"{where}: no proxy link for side {side!r} (have {sorted(links)})")
        if (
            f.kind == "partition"
            and f.mode == "refuse"
            and (f.toxicity < 1 or f.direction != "both")
        ):
            problems.append(
                f"{where}: partition mode 'refuse' closes the whole link; it needs toxicity 1 "
                f"and direction 'both' (got {f.toxicity:g}, {f.direction!r})"
            )
    return problems
