"""Observation: broker statistics pollers (stats.py), the timeseries sampler, the ledger,
environment facts and metric exporters. Import the submodules directly; this package imports
nothing, so the simulator can use the ledger without loading broker clients."""
