"""The corpus path: a whole table of lines synthesized on Ray Data, resumable, every row accounted for.

rows.py checks each input row, ledger.py keeps what OUT_DIR holds and why, worker.py is the
callable class each actor runs, run.py ties them to Ray. Imports only codes.runtime and codes.common.
"""
