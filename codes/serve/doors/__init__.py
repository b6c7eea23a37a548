"""The doors: each translates one protocol into the request core and back, and nothing more.

HTTP (`http.py`, behind `guard.py`: origin, key, body bounds; with the playground it serves), the voice
agents' WebSocket (`stream.py`), Wyoming (`wyoming.py` over `wyoming_wire.py`) and MCP (`mcp.py`); what each
hands the server to start it is `contract.Door`. Doors import the core, the edge and the voices, never
each other's internals, and nothing below imports a door.
"""
