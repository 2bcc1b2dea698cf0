"""The HTTP face, built on control/: the server, the API routes (api,
writes, stream), the web UI (ui, with templates/ and static/), hooks,
sessions, client certificates, idempotency keys and /metrics."""
