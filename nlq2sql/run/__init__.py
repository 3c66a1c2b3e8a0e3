"""Run machinery: config, item runner, replica pool, workers, engines (Ray, Ray Data), session, local server."""

__all__: list[str] = []
