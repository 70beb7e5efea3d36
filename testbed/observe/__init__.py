"""Observation: the recorder every live loop writes its rows through (recorder.py), broker
statistics pollers (stats.py), the timeseries sampler, the live side's ledger files, environment
facts and metric exporters. Import the submodules directly; this package imports nothing."""
