"""Thin entry points, one per DVC stage: read params, call the library, write outputs atomically."""
