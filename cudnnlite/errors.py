"""The library's exception hierarchy, mirroring cuDNN's status codes.

=======================  ==============================  =========================
exception                cuDNN status                    also an instance of
=======================  ==============================  =========================
BadParamError            CUDNN_STATUS_BAD_PARAM          ValueError
NotSupportedError        CUDNN_STATUS_NOT_SUPPORTED      NotImplementedError
CompileError             (NVRTC / g++ failure)           RuntimeError
ExecutionError           CUDNN_STATUS_EXECUTION_FAILED   RuntimeError
=======================  ==============================  =========================
"""

from __future__ import annotations


class CudnnliteError(Exception):
    """Base class of every error raised by cudnnlite."""

    status = "CUDNN_STATUS_INTERNAL_ERROR"


class BadParamError(CudnnliteError, ValueError):
    """An argument has the wrong type, shape, dtype or value."""

    status = "CUDNN_STATUS_BAD_PARAM"


class NotSupportedError(CudnnliteError, NotImplementedError):
    """The arguments are valid but this combination is not implemented."""

    status = "CUDNN_STATUS_NOT_SUPPORTED"


class CompileError(CudnnliteError, RuntimeError):
    """A kernel failed to compile (NVRTC on a GPU, g++ for the emulator)."""

    status = "CUDNN_STATUS_INTERNAL_ERROR"


class ExecutionError(CudnnliteError, RuntimeError):
    """A kernel failed while running (emulator fault, CUDA launch failure)."""

    status = "CUDNN_STATUS_EXECUTION_FAILED"
