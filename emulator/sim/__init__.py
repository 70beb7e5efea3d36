"""SimPy model of a scenario (docs/models.md §1–§4): the simulator half of a prediction.

Modules, in the order a message meets them:

- ``kernel``: one SimPy ``Environment``, cheap callback events, per-component random streams;
- ``producers``: open-loop schedules (``testbed.core.arrivals``) and closed loops;
- ``broker``: the three service models of §3 (``amqp``, ``threads``, ``shared_lock``), routing,
  memory flow control;
- ``queues``: ready copies, prefetch credit, round-robin dispatch, visibility leases (§4);
- ``consumers``: service, ack modes, failures, follow-up chains;
- ``recorder``: columnar records → the tables of ``testbed.core.records``; ``ledger``: the
  Jepsen-style totals from those tables; ``summary``: means and 95 % CIs across replications;
- ``faults`` (+ ``faults_clients``, ``faults_net``): the scenario's fault timeline — broker
  kill/pause/restart/alarms, client crashes, stochastic failure/repair, network toxics (§6) —
  acting through the hook points of ``links`` that producers, broker and consumers call;
- ``costs``: a calibration profile split into the models' per-message costs (§9);
- ``model``: assembles and runs one replication; ``runner``: many, in parallel processes.

    from emulator.sim import Model
    result = Model(scenario, profile, replication=0).run()
"""

from __future__ import annotations

__all__ = ["Model", "SimResult", "run_replications"]

from emulator.sim.model import Model, SimResult
from emulator.sim.runner import run_replications
