"""The network edge: bounds and their flags (`limits.py`), HTTP connections bounded at the socket
(`connections.py`), which web pages may call (`origins.py`), how a failure reads (`errors.py`) and OpenAI's
error body and stream event (`envelope.py`), the Ray proxy's envelope (`proxy_errors.py`) and draining
(`draining.py`). It imports nothing of the serve wing above it; `envelope.py` and `proxy_errors.py` only
the standard library, since Ray's proxy loads them alone.
"""
