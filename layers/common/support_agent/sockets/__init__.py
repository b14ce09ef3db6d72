"""The WebSocket channel (docs/API.md#websocket): its connection store, the ``@connections`` poster, its routes."""
