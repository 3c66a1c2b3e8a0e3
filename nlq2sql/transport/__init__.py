"""Talking to an endpoint: the request, the stream reader, the clients, the server's /metrics."""

__all__: list[str] = []
