"""Foreign load: the CPU other work takes from a measurement (calibration, the accuracy gate).

A figure measured on a 2-core machine while something else runs measures that something too;
`CpuMeter` says how much CPU processes outside a given tree (and the hypervisor) used over a
span, so a measurement taken under load can be rejected or flagged.
"""

from __future__ import annotations

__all__ = ["CpuMeter"]

import os
import time
from collections.abc import Sequence

import psutil


class CpuMeter:
    """CPU seconds used on the whole machine and by this process tree (and the trees of
    ``also``: the broker, when `mqbed up` started it outside this process), since creation.

    Foreign load includes *steal*: time the hypervisor gave this virtual machine's CPUs to
    other guests (``/proc/stat``'s steal column). No process of this machine shows it, yet it
    slows the client path as much as a local process would; on a shared cloud host it comes and
    goes with the neighbours."""

    def __init__(self, also: Sequence[int] = ()) -> None:
        self.roots = [psutil.Process(os.getpid())]
        for pid in also:
            try:
                self.roots.append(psutil.Process(pid))
            except psutil.Error:
                continue
        self.t0 = time.monotonic()
        self.machine0, self.steal0 = self._machine()
        self.tree0 = self._tree()

    @staticmethod
    def _machine() -> tuple[float, float]:
        """(CPU seconds the machine was busy, including steal; of them, steal)."""
        t = psutil.cpu_times()
        steal = float(getattr(t, "steal", 0.0))
        busy = t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0)
        return float(busy) + steal, steal

    def _tree(self) -> dict[int, float]:
        out = {}
        procs = []
        for root in self.roots:
            try:
                procs += [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
        for p in procs:
            try:
                c = p.cpu_times()
                out[p.pid] = c.user + c.system + c.children_user + c.children_system
            except psutil.Error:
                continue
        return out

    def steal_cores(self) -> float:
        """Average cores taken by the hypervisor (steal) since construction."""
        wall = max(time.monotonic() - self.t0, 1e-6)
        return max(self._machine()[1] - self.steal0, 0.0) / wall

    def foreign_cores(self) -> float:
        """Average cores used by processes outside this tree, or stolen by the hypervisor,
        since construction."""
        wall = max(time.monotonic() - self.t0, 1e-6)
        machine = self._machine()[0] - self.machine0
        now = self._tree()
        ours = sum(max(v - self.tree0.get(pid, 0.0), 0.0) for pid, v in now.items())
        return max(machine - ours, 0.0) / wall
