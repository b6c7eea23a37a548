"""Voices for every door, one module per job; none of them knows the server's state (codes/serve/core/state.py),
each takes what it needs: the loaded model as `pins.PinEngine`, the voices folder, the limits.

- `book`: the names (OpenAI's built-in design voices, saved voices on disk, imported ones) and the saved
  voices' folder (save, delete, read).
- `pins`: design voices pinned as clone prompts, in memory and under `<voices_dir>/pinned/`.
- `files`: wyoming-piper folders imported (--voices-from), voice files read from uploads, any voice exported.
- `uploads`: clips and voice files uploaded as saved voices, and a request's one-off clip.
- `resolver`: `Voices`, the one way a door turns a voice name into a voice.

Imports run book -> pins -> resolver -> files -> uploads (each may use those before it, never one after).
"""
