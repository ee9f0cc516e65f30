// The pointwise half of a recurrent step: the gate nonlinearities, the cell update and
// the state writes, fused into one launch per step for both directions (grid.y =
// direction). The GEMMs around it (x W_ih^T for every step at once, h W_hh^T per step,
// the projection) are the solver's (cudnnlite/solvers/rnn/standard.py).
//
// Arithmetic and every buffer marked A below are in A = cl::acc_t<T>: float for
// float/__half/__nv_bfloat16, double for double (the GEMMs around the cells then run in
// double too).
//
// Kernels (T = float | __half | __nv_bfloat16 | double, MODE = rnn::kMode*):
//   rnn_cell_fwd<T, MODE>   one thread per (direction, batch row, hidden unit): gates from
//                           the input projection gx, the recurrent product gh and both
//                           biases; new c (A) and h (T); y, or r = o * tanh(c) for the
//                           projection; in training saves what the backward needs.
//   rnn_proj_commit<T>      LSTM with projections: h = r W_hr^T (A GEMM result) into the
//                           state and y, active rows only.
//   rnn_cell_bwd<T, MODE>   the step's gate gradients (A) into dgx (every step, for the
//                           weight and input GEMMs) and dgh_step (this step, for dh W_hh),
//                           the cell-state carry, and the direct part of the h carry.
//   rnn_proj_dh<A>          LSTM with projections: dh of the step = carry + dy, saved for
//                           dW_hr, carry cleared (the GEMM with W_hh refills it).
//
// Layouts (contiguous, d = direction, t = time, b = batch row; G gates, H hidden, Ho = h's
// size, P = Ho with projections):
//   gx, s_gates, dgx (D, T, B, G*H) A     gh, dgh_step (D, B, G*H) A
//   hstate (D, B, Ho) T      cstate (D, B, H) A     y / dy (T, B, D*Ho)
//   s_c, s_ghn (D, T, B, H) A      s_h (D, T, B, Ho) T: h before the step
//   r, dr (D, B, H): this step's o * tanh(c) (T) and its gradient (A)
//   dgh (D, T, B, G*H) A: GRU only (its n gate's recurrent part differs from dgx's)
// Time: direction 0 runs t = 0 .. T-1, direction 1 t = T-1 .. 0 (the forward kernels at
// `step` take t = step / T-1-step, the backward ones the reverse). With lengths, row b
// exists for t < len[b] only: an absent row keeps its state, gets y = 0, and gradient 0.
// The cell math is rnn/rnn_cell.cuh's (shared with the persistent kernel).
// Every kernel runs blocks of 256 threads (solvers/rnn/common.py, THREADS).
// Defines: none (one module per dtype and mode).
#include "rnn/rnn_cell.cuh"

template <typename T, int MODE>
__global__ void __launch_bounds__(256)
    rnn_cell_fwd(
    // inputs
    const cl::acc_t<T>* __restrict__ gx, const cl::acc_t<T>* __restrict__ gh,
    const T* __restrict__ b_ih, const T* __restrict__ b_hh, const int* __restrict__ lengths,
    // state, updated in place
    T* __restrict__ hstate, cl::acc_t<T>* __restrict__ cstate,
    // outputs
    T* __restrict__ y, T* __restrict__ r,
    // saved for the backward (training only)
    cl::acc_t<T>* __restrict__ s_gates, cl::acc_t<T>* __restrict__ s_c, T* __restrict__ s_h,
    cl::acc_t<T>* __restrict__ s_ghn, RnnCellParams p) {
    typedef cl::acc_t<T> A;
    RnnCellIndex c;
    if (!cell_index(p, p.h, lengths, false, c)) return;
    const bool proj = p.hout != p.h;
    const long long row = (long long)c.d * p.b + c.b;                  // (d, b)
    const long long trow = ((long long)c.d * p.steps + c.t) * p.b + c.b;  // (d, t, b)
    const long long ystate = row * p.hout + c.j;  // (with projections unused: j < H, not P)
    if (p.training && !proj) s_h[trow * p.hout + c.j] = hstate[ystate];
    if (!c.active) {
        if (!proj)
            y[(long long)c.t * p.b * p.y_ld + c.b * p.y_ld + c.d * p.hout + c.j] =
                cl::from_acc<T>(A(0));
        return;
    }
    const A* gxr = gx + trow * p.gh;
    const A* ghr = gh + row * p.gh;
    const T* bi = b_ih + (long long)c.d * p.gh;
    const T* bh = b_hh + (long long)c.d * p.gh;
    A* sg = s_gates + trow * p.gh;
    auto pre = [&](int g) {
        int k = g * p.h + c.j;
        A v = gxr[k] + cl::to_acc(bi[k]);
        return MODE == rnn::kGru && g == 2 ? v : v + ghr[k] + cl::to_acc(bh[k]);
    };
    const int kn = 2 * p.h + c.j;
    A ghn = MODE == rnn::kGru ? ghr[kn] + cl::to_acc(bh[kn]) : A(0);
    A* cs = cstate + row * p.h + c.j;
    A cell = MODE == rnn::kLstm ? *cs : A(0);
    A gates[4];
    A h_prev = MODE == rnn::kGru ? cl::to_acc(hstate[ystate]) : A(0);
    A h_new = rnn::cell_forward<MODE>(pre, ghn, cell, h_prev, gates);
    if (MODE == rnn::kLstm) {
        if (p.training) s_c[trow * p.h + c.j] = *cs;
        *cs = cell;
    }
    if (p.training) {
#pragma unroll
        for (int g = 0; g < rnn::Gates<MODE>::value; ++g) sg[g * p.h + c.j] = gates[g];
        if (MODE == rnn::kGru) s_ghn[trow * p.h + c.j] = ghn;
    }
    if (proj) {
        r[row * p.h + c.j] = cl::from_acc<T>(h_new);
        return;
    }
    T hv = cl::from_acc<T>(h_new);
    hstate[ystate] = hv;
    y[(long long)c.t * p.b * p.y_ld + c.b * p.y_ld + c.d * p.hout + c.j] = hv;
}

template <typename T>
__global__ void __launch_bounds__(256)
    rnn_proj_commit(const cl::acc_t<T>* __restrict__ hp,
                    const int* __restrict__ lengths, T* __restrict__ hstate,
                    T* __restrict__ y, T* __restrict__ s_h, RnnCellParams p) {
    typedef cl::acc_t<T> A;
    RnnCellIndex c;
    if (!cell_index(p, p.hout, lengths, false, c)) return;
    const long long row = (long long)c.d * p.b + c.b;
    const long long trow = ((long long)c.d * p.steps + c.t) * p.b + c.b;
    const long long k = row * p.hout + c.j;
    if (p.training) s_h[trow * p.hout + c.j] = hstate[k];
    T* yv = y + (long long)c.t * p.b * p.y_ld + c.b * p.y_ld + c.d * p.hout + c.j;
    if (!c.active) {
        *yv = cl::from_acc<T>(A(0));
        return;
    }
    T hv = cl::from_acc<T>(hp[k]);
    hstate[k] = hv;
    *yv = hv;
}

template <typename T, int MODE>
__global__ void __launch_bounds__(256)
    rnn_cell_bwd(
    // inputs: dy (T, B, D*Ho), or with projections dr (D, B, H) = this step's dh W_hr
    const cl::acc_t<T>* __restrict__ dh_in, const cl::acc_t<T>* __restrict__ s_gates,
    const cl::acc_t<T>* __restrict__ s_c, const T* __restrict__ s_h,
    const cl::acc_t<T>* __restrict__ s_ghn, const int* __restrict__ lengths,
    // carries, updated in place
    cl::acc_t<T>* __restrict__ dh_carry, cl::acc_t<T>* __restrict__ dc_carry,
    // outputs
    cl::acc_t<T>* __restrict__ dgx, cl::acc_t<T>* __restrict__ dgh,
    cl::acc_t<T>* __restrict__ dgh_step, RnnCellParams p) {
    typedef cl::acc_t<T> A;
    RnnCellIndex c;
    if (!cell_index(p, p.h, lengths, true, c)) return;
    const bool proj = p.hout != p.h;
    const long long row = (long long)c.d * p.b + c.b;
    const long long trow = ((long long)c.d * p.steps + c.t) * p.b + c.b;
    A* gxo = dgx + trow * p.gh;
    A* gho = dgh_step + row * p.gh;
    constexpr int G = rnn::Gates<MODE>::value;
    A* gha = dgh + trow * p.gh;  // GRU only
    if (!c.active) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            gxo[g * p.h + c.j] = gho[g * p.h + c.j] = A(0);
            if (MODE == rnn::kGru) gha[g * p.h + c.j] = A(0);
        }
        return;
    }
    A dh;
    if (proj) {
        dh = dh_in[row * p.h + c.j];
    } else {
        A* carry = dh_carry + row * p.hout + c.j;
        dh = *carry + dh_in[(long long)c.t * p.b * p.y_ld + c.b * p.y_ld + c.d * p.hout + c.j];
        *carry = A(0);  // the GEMM with W_hh adds the rest
    }
    const A* sg = s_gates + trow * p.gh;
    if (MODE == rnn::kLstm) {
        A i = sg[c.j], f = sg[p.h + c.j], g = sg[2 * p.h + c.j], o = sg[3 * p.h + c.j];
        A c_prev = s_c[trow * p.h + c.j];
        A tc = cl::math::tanh(f * c_prev + i * g);
        A* dcs = dc_carry + row * p.h + c.j;
        A dc = *dcs + dh * o * (A(1) - tc * tc);
        *dcs = dc * f;
        A gi = dc * g * i * (A(1) - i), gf = dc * c_prev * f * (A(1) - f);
        A gg = dc * i * (A(1) - g * g), go = dh * tc * o * (A(1) - o);
        gxo[c.j] = gho[c.j] = gi;
        gxo[p.h + c.j] = gho[p.h + c.j] = gf;
        gxo[2 * p.h + c.j] = gho[2 * p.h + c.j] = gg;
        gxo[3 * p.h + c.j] = gho[3 * p.h + c.j] = go;
    } else if (MODE == rnn::kGru) {
        A rg = sg[c.j], z = sg[p.h + c.j], n = sg[2 * p.h + c.j];
        A h_prev = cl::to_acc(s_h[trow * p.hout + c.j]);
        A gn = dh * (A(1) - z) * (A(1) - n * n);
        A gz = dh * (h_prev - n) * z * (A(1) - z);
        A gr = gn * s_ghn[trow * p.h + c.j] * rg * (A(1) - rg);
        dh_carry[row * p.hout + c.j] = dh * z;
        gxo[c.j] = gho[c.j] = gha[c.j] = gr;
        gxo[p.h + c.j] = gho[p.h + c.j] = gha[p.h + c.j] = gz;
        gxo[2 * p.h + c.j] = gn;
        gho[2 * p.h + c.j] = gha[2 * p.h + c.j] = gn * rg;
    } else {
        A hv = sg[c.j];
        // relu: dh where h > 0 and where h is NaN (PyTorch's threshold_backward zeroes only
        // h <= 0: a NaN pre-activation passes dh, as its relu passes the NaN)
        A g = MODE == rnn::kTanh ? dh * (A(1) - hv * hv) : (hv <= A(0) ? A(0) : dh);
        gxo[c.j] = gho[c.j] = g;
    }
}

template <typename A>
__global__ void __launch_bounds__(256)
    rnn_proj_dh(const A* __restrict__ dy, const int* __restrict__ lengths,
                A* __restrict__ dh_carry, A* __restrict__ dh_step,
                A* __restrict__ dh_save, RnnCellParams p) {
    RnnCellIndex c;
    if (!cell_index(p, p.hout, lengths, true, c)) return;
    const long long k = ((long long)c.d * p.b + c.b) * p.hout + c.j;
    const long long ks = (((long long)c.d * p.steps + c.t) * p.b + c.b) * p.hout + c.j;
    A v = A(0);
    if (c.active) {
        v = dh_carry[k] + dy[(long long)c.t * p.b * p.y_ld + c.b * p.y_ld + c.d * p.hout + c.j];
        dh_carry[k] = A(0);
    }
    dh_step[k] = v;
    dh_save[ks] = v;
}
