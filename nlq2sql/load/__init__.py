"""Load generation and sweeps: measure the serving path, not the configuration.

Sweeps find the knee, saturation and SLO operating points on the eval set's real prompts;
``serialization`` says with evidence whether concurrent requests are batched; probes measure
cancellation, ``/health`` under prefill and prefix reuse. Each is a registered mode run through
``modes.run_mode(name, settings)``. Nothing in the evaluation core imports this package."""

__all__: list[str] = []
