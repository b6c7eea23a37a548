"""The request core: one life per request (`lifecycle.py`), its fields (`params.py`), its sentences and a
script's segments as work on the engine (`sentences.py`, `segments.py`), the state the doors share
(`state.py`), the loaded model with its engine and codec pools (`loaded_model.py`) and the audio encoders
(`encode.py`). It imports the edge and the voices, never a door.
"""
