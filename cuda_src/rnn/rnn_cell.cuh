// The recurrent cells' math and the parameters of a step, shared by the per-step cell
// kernels (rnn_cell.cu) and the persistent kernel (rnn_persistent.cu), so both compute a
// step the same way. Gate orders are PyTorch's: LSTM i, f, g, o; GRU r, z, n with
// n = tanh(x_n + r * (h W_hn^T + b_hn)); the RNN's one gate is h itself.
#pragma once
#include "common/cudnnlite.cuh"

namespace rnn {
enum Mode { kTanh = 0, kRelu = 1, kLstm = 2, kGru = 3 };

// A: the arithmetic type, float or double (cl::acc_t of the storage type).
template <typename A>
__device__ __forceinline__ A sigmoid(A v) { return A(1) / (A(1) + cl::math::exp(-v)); }

// Gates per unit, at compile time (loops over gates unroll; no local-memory arrays).
template <int MODE>
struct Gates {
    static constexpr int value = MODE == kLstm ? 4 : (MODE == kGru ? 3 : 1);
};

// One step of one (direction, row, unit): `pre(g)` is gate g's pre-activation without the
// GRU n gate's recurrent part, `ghn` that part (h W_hn^T + b_hn; GRU only), c the cell state
// (LSTM; updated), h_prev the previous h (GRU). Returns the new h; `gates` gets the gates
// after their nonlinearities (what the backward reads).
template <int MODE, typename A, typename Pre>
__device__ __forceinline__ A cell_forward(Pre pre, A ghn, A& c, A h_prev, A gates[4]) {
    if (MODE == kLstm) {
        A i = sigmoid(pre(0)), f = sigmoid(pre(1));
        A g = cl::math::tanh(pre(2)), o = sigmoid(pre(3));
        c = f * c + i * g;
        gates[0] = i, gates[1] = f, gates[2] = g, gates[3] = o;
        return o * cl::math::tanh(c);
    }
    if (MODE == kGru) {
        A r = sigmoid(pre(0)), z = sigmoid(pre(1));
        A n = cl::math::tanh(pre(2) + r * ghn);
        gates[0] = r, gates[1] = z, gates[2] = n;
        return (A(1) - z) * n + z * h_prev;
    }
    A v = pre(0);
    A h = MODE == kTanh ? cl::math::tanh(v) : cl::math::fmax(v, A(0));
    if (MODE == kRelu && v != v) h = v;  // fmax drops NaN; PyTorch's relu keeps it
    gates[0] = h;
    return h;
}
}  // namespace rnn

// solvers/rnn/common.py: CELL_PARAMS_DTYPE.
struct RnnCellParams {
    int b, h, hout, gh;  // batch, hidden, size of h, gates * hidden
    int steps, step;     // T, the step being run (see the file comment for its t)
    int has_len, training;
    long long y_ld;      // row stride of y / dy: directions * hout
};

struct RnnCellIndex {
    int d, b, j, t;
    bool active;
};

// The (direction, row, unit) of this thread, or false past the end. `backward` flips time.
__device__ __forceinline__ bool cell_index(const RnnCellParams& p, int width, const int* lengths,
                                           bool backward, RnnCellIndex& c) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // range [0, B * width)
    if (idx >= (long long)p.b * width) return false;
    c.d = blockIdx.y;
    c.b = (int)(idx / width);
    c.j = (int)(idx - (long long)c.b * width);
    bool reverse = (c.d == 1) != backward;
    c.t = reverse ? p.steps - 1 - p.step : p.step;
    c.active = !p.has_len || c.t < lengths[c.b];
    return true;
}

