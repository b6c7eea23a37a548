"""How a server starts: one server's setup from the flags (`startup.py`), running it in one process
(`run.py`), and as Ray Serve replicas behind one port (`deployment.py`, the replica `replica.py`). It
assembles the doors; nothing imports it but serve.py.
"""
