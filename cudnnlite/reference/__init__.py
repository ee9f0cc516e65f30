"""NumPy float64 references of every primitive (public): the ground truth the tests
compare kernels against, usable by anyone checking their own kernels."""

from . import activation
from .activation import activation_backward, activation_forward

__all__ = ["activation", "activation_backward", "activation_forward"]
