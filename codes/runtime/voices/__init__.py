"""Voices and prompts: a voice (a clone prompt) and its files, trimming one, and the model's input built from a
request (the prompt's layout and the CFG batch)."""
