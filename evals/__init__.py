"""The evaluation suite: support tasks as data, a simulated customer, end-state checks and pass^k.

docs/EVALUATION.md says how to write a task, run it and read the report.
"""
