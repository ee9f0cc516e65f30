"""The standard RNN algorithm (cuDNN's CUDNN_RNN_ALGO_STANDARD).

Forward, per layer: the input projection of every time step at once, one GEMM per
direction (``x W_ih^T`` into an fp32 buffer, both directions in one batched call); then per
step one batched GEMM ``h W_hh^T`` for both directions and one fused cell kernel (biases,
gates, cell update, state and output writes, the saves for training); with projections a
third GEMM ``r W_hr^T`` and a commit kernel. Both directions advance in the same launches,
so they run concurrently.

Backward, per layer from the top: the data gradient through time in reverse (per step the
cell's backward kernel and one batched GEMM ``dG W_hh`` for the h carry), then the weight
and input gradients as large GEMMs over all time steps at once: dW_ih = dG^T x,
dW_hh = dG^T h_prev, dW_hr = dh^T r, dx = dG W_ih; bias gradients are column sums of dG.
The backward's GEMMs run in fp32 (the saved gate gradients are fp32; 16-bit inputs are
widened), the forward's take the data type's inputs with fp32 accumulation and output.
float64 runs all of it in float64 instead (DGEMMs, double cells and buffers).

GEMMs go through ``runtime.blas`` (cuBLAS on a GPU, NumPy's matmul on the emulator); the
cell kernels are ``cuda_src/rnn/rnn_cell.cu``. Deterministic: no atomics.
"""

from __future__ import annotations

from typing import Any

from ...problems.rnn import RnnProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import (
    CellKernels,
    LayerSaves,
    RnnBwdTensors,
    RnnScalars,
    RnnTensors,
    acc_dtype,
    module_specs,
    prepare_stacked_gemm,
    stacked_gemm,
)


def _stand_in(a: Any, *others: Any) -> Any:
    """``a``, or the first of ``others`` that is an array (a pointer the kernel ignores)."""
    if a is not None:
        return a
    return next(o for o in others if o is not None)


class ForwardRunner(Runner):
    """The layer loop shared by the forward solvers; ``recurrence`` is the per-layer time
    loop (the standard solver's launches per step; the persistent solver's one launch)."""

    def __init__(self, backend: Backend, problem: RnnProblem) -> None:
        self.backend = backend
        self.problem = problem
        self.cell = CellKernels(backend, problem)

    @property
    def kernel_names(self) -> list[str]:
        return ["gemm_x_w_ih", "gemm_h_w_hh", *self.cell.names]

    def __call__(self, tensors: RnnTensors, scalars: RnnScalars, workspace: Any) -> None:
        p, xp, acc = self.problem, self.backend.xp, acc_dtype(self.problem)
        d_, t_, b_, h_, gh = p.dirs, p.t, p.b, p.h, p.gates * p.h
        training = tensors.reserve is not None
        x = tensors.x
        for layer in range(p.layers):
            w = tensors.weights[layer]
            lo, hi = layer * d_, (layer + 1) * d_
            gx = xp.empty((d_, t_, b_, gh), acc)
            stacked_gemm(self.backend, x.reshape(t_ * b_, -1), w.w_ih,
                         gx.reshape(d_, t_ * b_, gh), trans_b=True)  # fmt: skip
            hstate = tensors.hy[lo:hi]
            if tensors.hx is not None:
                hstate[...] = tensors.hx[lo:hi]
            else:
                hstate.fill(0)
            cstate = xp.zeros((d_, b_, h_), acc)
            if tensors.cx is not None:
                cstate[...] = tensors.cx[lo:hi]
            last = layer == p.layers - 1
            y = tensors.y if last else xp.empty((t_, b_, d_ * p.hout), x.dtype)
            saves = None
            if training:
                # Zeros: absent steps (lengths) are never written but enter the weight GEMMs
                # (times a zero gradient, which garbage such as NaN would still poison).
                alloc = xp.zeros if p.varlen else xp.empty
                saves = LayerSaves(
                    x=x,
                    gates=alloc((d_, t_, b_, gh), acc),
                    c=alloc((d_, t_, b_, h_), acc) if p.mode == "lstm" else None,
                    h=xp.empty((d_, t_, b_, p.hout), x.dtype),
                    ghn=xp.empty((d_, t_, b_, h_), acc) if p.mode == "gru" else None,
                )
                tensors.reserve.layers.append(saves)
            self.recurrence(tensors, layer, gx, hstate, cstate, y, saves)
            if tensors.cy is not None:
                tensors.cy[lo:hi] = cstate
            if not last:
                x = y
                if p.dropout and scalars.dropout > 0 and training:
                    from ...ops.dropout import dropout

                    x = dropout(y, scalars.dropout, seed=scalars.seed, offset=layer)

    def recurrence(self, tensors: RnnTensors, layer: int, gx: Any, hstate: Any, cstate: Any,
                   y: Any, saves: LayerSaves | None) -> None:  # fmt: skip
        p, xp, cell = self.problem, self.backend.xp, self.cell
        acc = acc_dtype(p)
        w = tensors.weights[layer]
        gh = xp.empty((p.dirs, p.b, p.gates * p.h), acc)
        proj = p.p > 0
        r = xp.empty((p.dirs, p.b, p.h), hstate.dtype) if proj else None
        hp = xp.empty((p.dirs, p.b, p.p), acc) if proj else None
        lengths = tensors.lengths
        s = saves
        sg = s.gates if s else gx  # stand-ins where nothing is saved
        sc = s.c if s and s.c is not None else sg
        sh = s.h if s else hstate
        sghn = s.ghn if s and s.ghn is not None else sg
        lens = _stand_in(lengths, gx)
        # Every step multiplies and updates the same buffers (h is rewritten between
        # them): the GEMMs and the launches are checked and prepared once per layer, and a
        # step passes its parameters (Kernel.prepare).
        recurrent = prepare_stacked_gemm(self.backend, hstate, w.w_hh, gh, trans_b=True)
        step_params = [cell.params(t, s is not None, lengths is not None) for t in range(p.t)]
        fwd_args = (gx, gh, w.b_ih, w.b_hh, lens, hstate, cstate, y, _stand_in(r, y), sg, sc,
                    sh, sghn, step_params[0])  # fmt: skip
        fwd = cell.fwd.prepare(cell.grid(p.h), (256,), fwd_args)
        if proj:
            project = prepare_stacked_gemm(self.backend, r, w.w_hr, hp, trans_b=True)
            commit = cell.commit.prepare(cell.grid(p.p), (256,),
                                         (hp, lens, hstate, y, sh, step_params[0]))  # fmt: skip
        for prm in step_params:
            recurrent()
            fwd(prm)
            if proj:
                project()
                commit(prm)


class BackwardRunner(Runner):
    """Backward through time, then the big GEMMs (module docstring)."""

    def __init__(self, backend: Backend, problem: RnnProblem) -> None:
        self.backend = backend
        self.problem = problem
        self.cell = CellKernels(backend, problem)

    @property
    def kernel_names(self) -> list[str]:
        return [f"rnn_cell_bwd_{self.problem.mode}", "gemm_dg_w_hh", "gemm_weight_grads"]

    def __call__(self, tensors: RnnBwdTensors, scalars: RnnScalars, workspace: Any) -> None:
        p, xp, acc = self.problem, self.backend.xp, acc_dtype(self.problem)
        res = tensors.reserve
        dy = tensors.dy.astype(acc)  # a copy even when fp32: the layers below overwrite it
        for layer in reversed(range(p.layers)):
            lo, hi = layer * p.dirs, (layer + 1) * p.dirs
            saves = res.layers[layer]
            dh = xp.zeros((p.dirs, p.b, p.hout), acc)
            if tensors.dhy is not None:
                dh[...] = tensors.dhy[lo:hi]
            dc = xp.zeros((p.dirs, p.b, p.h), acc)
            if tensors.dcy is not None:
                dc[...] = tensors.dcy[lo:hi]
            dgx, dgh, dh_save = self.through_time(res, layer, dy, dh, dc)
            tensors.dhx[lo:hi] = dh
            if tensors.dcx is not None:
                tensors.dcx[lo:hi] = dc
            dx = self.weight_grads(tensors, layer, saves, dgx, dgh, dh_save)
            if layer == 0:
                tensors.dx[...] = dx
            else:
                dy = dx
                if p.dropout and scalars.dropout > 0:
                    from ...ops.dropout import dropout_backward

                    dy = dropout_backward(dx, scalars.dropout, seed=scalars.seed,
                                          offset=layer - 1, out=dx)  # fmt: skip

    def through_time(self, res: Any, layer: int, dy: Any, dh: Any, dc: Any) -> tuple[Any, ...]:
        p, xp, cell, acc = self.problem, self.backend.xp, self.cell, acc_dtype(self.problem)
        s = res.layers[layer]
        gh = p.gates * p.h
        w_hh = res.weights[layer].w_hh.astype(acc)
        w_hr = res.weights[layer].w_hr.astype(acc) if p.p else None
        dgx = xp.empty((p.dirs, p.t, p.b, gh), acc)
        dgh = xp.empty_like(dgx) if p.mode == "gru" else dgx
        dgh_step = xp.empty((p.dirs, p.b, gh), acc)
        dh_step = xp.empty((p.dirs, p.b, p.p), acc) if p.p else None
        dh_save = xp.empty((p.dirs, p.t, p.b, p.p), acc) if p.p else None
        dr = xp.empty((p.dirs, p.b, p.h), acc) if p.p else None
        lens = _stand_in(res.lengths, dgx)
        has_len = res.lengths is not None
        sc = s.c if s.c is not None else s.gates
        sghn = s.ghn if s.ghn is not None else s.gates
        # (the same buffers every step: the GEMMs and launches are prepared once)
        step_params = [cell.params(t, True, has_len) for t in range(p.t)]
        carry = prepare_stacked_gemm(self.backend, dgh_step, w_hh, dh, beta=1.0)
        bwd = cell.bwd.prepare(cell.grid(p.h), (256,), (dr if p.p else dy, s.gates, sc, s.h,
                               sghn, lens, dh, dc, dgx, dgh, dgh_step, step_params[0]))  # fmt: skip
        if p.p:
            project = prepare_stacked_gemm(self.backend, dh_step, w_hr, dr)
            proj_args = (dy, lens, dh, dh_step, dh_save, step_params[0])
            proj_dh = cell.proj_dh.prepare(cell.grid(p.p), (256,), proj_args)
        for prm in step_params:
            if p.p:
                proj_dh(prm)
                project()
            bwd(prm)
            carry()
        return dgx, dgh, dh_save

    def weight_grads(self, tensors: RnnBwdTensors, layer: int, saves: LayerSaves, dgx: Any,
                     dgh: Any, dh_save: Any) -> Any:  # fmt: skip
        """The layer's weight gradients into tensors.dweights[layer]; returns dx (in the
        accumulation type)."""
        p, xp, be, acc = self.problem, self.backend.xp, self.backend, acc_dtype(self.problem)
        res = tensors.reserve
        w, dw = res.weights[layer], tensors.dweights[layer]
        rows = p.t * p.b
        gh = p.gates * p.h
        x32 = saves.x.reshape(rows, -1).astype(acc)  # (a copy)
        if res.lengths is not None:
            # Steps past a sequence's end do not exist: its x there (padding, any value)
            # gets a zero gradient, but 0 * NaN would still poison dW_ih.
            present = xp.arange(p.t)[:, None] < res.lengths[None, :]
            x3 = x32.reshape(p.t, p.b, -1)
            x32 = xp.where(present[:, :, None], x3, x3.dtype.type(0)).reshape(rows, -1)
        dgx2 = dgx.reshape(p.dirs, rows, gh)
        dgh2 = dgh.reshape(p.dirs, rows, gh)
        dw_ih = xp.empty(w.w_ih.shape, acc)
        stacked_gemm(be, dgx2, x32, dw_ih, trans_a=True)
        dw.w_ih[...] = dw_ih
        dw_hh = xp.empty(w.w_hh.shape, acc)
        stacked_gemm(be, dgh2, saves.h.reshape(p.dirs, rows, p.hout).astype(acc), dw_hh,
                     trans_a=True)  # fmt: skip
        dw.w_hh[...] = dw_hh
        dw.b_ih[...] = dgx2.sum(axis=1)
        dw.b_hh[...] = dgh2.sum(axis=1)
        if p.p:
            g = saves.gates.reshape(p.dirs, rows, 4, p.h)
            c = g[:, :, 1] * saves.c.reshape(p.dirs, rows, p.h) + g[:, :, 0] * g[:, :, 2]
            r = g[:, :, 3] * xp.tanh(c)
            dw_hr = xp.empty(w.w_hr.shape, acc)
            stacked_gemm(be, dh_save.reshape(p.dirs, rows, p.p), xp.ascontiguousarray(r), dw_hr,
                         trans_a=True)  # fmt: skip
            dw.w_hr[...] = dw_hr
        dx = xp.empty((p.dirs, rows, w.w_ih.shape[2]), acc)
        stacked_gemm(be, dgx2, w.w_ih.astype(acc), dx)
        out = dx[0]
        for d in range(1, p.dirs):
            out += dx[d]
        return out.reshape(p.t, p.b, -1)


class _Standard(Solver):
    deterministic = True

    def is_applicable(self, problem: RnnProblem, caps: Capabilities) -> Applicability:
        if problem.empty:
            return not_applicable("needs a non-empty problem (the op answers empty ones)")
        return APPLICABLE

    def module_specs(self) -> list[ModuleSpec]:
        return module_specs()


class StandardFwdSolver(_Standard):
    """Input projection for all steps at once, then per step a GEMM and a fused cell kernel
    (module docstring)."""

    name = "rnn_fwd_standard"
    family = "rnn_fwd"

    def workspace_size(self, problem: RnnProblem, config: Config) -> int:
        p = problem
        size = acc_dtype(p).itemsize  # gx and gh (allocated per call)
        return size * p.dirs * (p.t + 1) * p.b * p.gates * p.h

    def prepare(self, backend: Backend, problem: RnnProblem, config: Config) -> Runner:
        return ForwardRunner(backend, problem)


class StandardBwdSolver(_Standard):
    """Backward through time with the saved gates, then the weight gradients as GEMMs over
    every time step at once (module docstring)."""

    name = "rnn_bwd_standard"
    family = "rnn_bwd"

    def workspace_size(self, problem: RnnProblem, config: Config) -> int:
        p = problem
        return acc_dtype(p).itemsize * p.dirs * (2 * p.t + 1) * p.b * p.gates * p.h

    def prepare(self, backend: Backend, problem: RnnProblem, config: Config) -> Runner:
        return BackwardRunner(backend, problem)
