"""Test helpers shared across the suite, one module per idea: a scripted model, tables from template.yaml in moto,
a harness for turns, and the set-ups more than one test module needs."""
