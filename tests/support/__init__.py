"""Test helpers: a scripted model, tables from template.yaml in moto, and a harness for turns."""
