"""Load generation and sweeps: measure the serving path, not the configuration.

``sweep`` runs the eval set's real prompts at rising concurrency and finds the knee, the
saturation point and the SLO operating points; ``serialization`` says, with evidence,
whether concurrent requests reach the engine as batched work; ``probes`` measure
cancellation, ``/health`` under prefill and prefix-cache reuse.  Each is a registered mode, run
by name through the one entry ``modes.run_mode(name, settings)``.

Nothing in the evaluation core imports this package; it builds on ``nlq2sql.run`` (config, live).
"""

__all__: list[str] = []
