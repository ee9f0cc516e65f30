"""The primitives, one module per family."""
