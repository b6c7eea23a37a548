"""The model and its step: one step's forward over the graphs, the masked decoding (schedule, scoring, reveals,
noise), and the step-level batching engine."""
