"""Hearing speech: the recogniser that transcribes a clip (Whisper), the aligner that times a known text's words,
and alignment, openai-whisper's forced alignment in numpy."""
