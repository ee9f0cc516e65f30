"""A scalar argument of -0.0 gives the sign its arithmetic gives, whatever ran before: the
checked-scalar caches key 0.0 and -0.0 apart (as keys they are equal), for activations
(alpha, coef), the convolution epilogue (alpha) and batch norm (eps). Found by fuzzing: a
-0.0 after a 0.0 of the same call shape took the cached +0.0."""

from __future__ import annotations

import numpy as np

import cudnnlite as cl


def test_activation_alpha_and_coef_keep_their_zero_sign() -> None:
    x = np.full(257, 2.0)
    for alpha, negative in ((0.0, False), (-0.0, True), (0.0, False)):
        y = cl.activation_forward(x, "relu", alpha=alpha)
        assert (np.signbit(y) == negative).all() and (y == 0).all()
        dx = cl.activation_backward(x, x, "relu", alpha=alpha)
        assert (np.signbit(dx) == negative).all()
    neg = np.full(33, -2.0, np.float32)
    for coef, negative in ((0.0, True), (-0.0, False)):  # leaky slope * -2
        y = cl.activation_forward(neg, "leaky_relu", coef=coef)
        assert (np.signbit(y) == negative).all() and (y == 0).all()


def test_conv_alpha_keeps_its_zero_sign() -> None:
    x, w = np.ones((1, 2, 4, 4), np.float32), np.ones((3, 2, 1, 1), np.float32)
    for alpha, negative in ((0.0, False), (-0.0, True), (0.0, False)):
        y = cl.conv2d(x, w, alpha=alpha, algo="direct")
        assert (np.signbit(y) == negative).all() and (y == 0).all()


def test_batch_norm_eps_keeps_its_zero_sign() -> None:
    # 1 / sqrt(var + eps) with var -0.0: -inf for eps -0.0, +inf for eps 0.0, in any order
    x, rm = np.ones((1, 1, 1, 1), np.float32), np.zeros(1, np.float32)
    rv = np.array([-0.0], np.float32)
    for eps, want in ((0.0, np.inf), (-0.0, -np.inf), (0.0, np.inf)):
        with cl.fast_paths_off():
            assert cl.batch_norm(x, rm, rv, eps=eps)[0, 0, 0, 0] == want
        assert cl.batch_norm(x, rm, rv, eps=eps)[0, 0, 0, 0] == want
