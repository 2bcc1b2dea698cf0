"""Operations: the typed requests both faces serve (issue 30, point 4).

A request is a frozen dataclass (``requests.py``), parsed once at the edge
(the control socket's JSON object, the HTTP API's query or body) by
``typed.parse``, with the same checks and messages on either face; the
handlers of ``runtime/control`` take the typed value, never a dict. The same
classes give the OpenAPI document its schemas (``typed.schema``).
"""
