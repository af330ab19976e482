"""Declarative task specs (YAML) shipped with areal-core; the format is in areal_core/tasks/spec.py."""
