"""Declarative task specs (YAML) shipped with areal-core; see areal_core/tasks.py for the format."""
