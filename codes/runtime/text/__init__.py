"""Text before the model: clean-up and tags, normalization, the tokenizer, streaming chunks, duration, and the
language and voice-design instruct a request names (the rules in codes/runtime/data/)."""
