// unfused.cu — scaled dot-product attention with the score matrix materialized in a
// workspace (b, hq, sq, skv) of the accumulation type A = cl::acc_t<T> (float, or double for
// double storage, where every sum, exp2 and log2 runs in double): the plain algorithm, for tiny shapes, any head dim, every
// dtype, and as the cross-check of the fused kernels. Simple loops, one thread per output
// element; nothing here is tuned (the flash solvers are the fast path).
//
// Kernels (T = float, __half, __nv_bfloat16, double; mask kind and dropout are runtime
// flags):
//   sdpa_unfused_scores<T>   S[b,h,i,j] = scale * q_i . k_j + mask (log2 domain), -inf
//                            where causal / window / lengths / a bool mask drop it
//   sdpa_unfused_softmax<A>  per row: lse (natural log) and P = exp2(S - max) / sum,
//                            in place; rows that keep nothing get P = 0, lse = -inf
//   sdpa_unfused_pv<T>       o[i,c] = sum_j P[i,j] * drop(i,j) * v[j,c]
//   backward: sdpa_unfused_dv<T> (dv = sum over the group's heads of (P*drop)^T dout),
//   sdpa_unfused_ds (P -> dS = P * (drop * dout_i . v_j - dout_i . o_i) in place, and the
//   additive mask's gradient), sdpa_unfused_dq<T>, sdpa_unfused_dk<T>.
// Every kernel runs blocks of 256 threads (solvers/attention/unfused.py, _THREADS).
#include "attention/attention_common.cuh"

namespace {

template <class P>
__device__ __forceinline__ long long row_index(const P& p, int bi, int h, int i) {
    return ((long long)bi * p.hq + h) * p.sq + i;
}

template <typename Ptr>  // const T* or T*
__device__ __forceinline__ Ptr row_ptr(Ptr base, long long sb, long long sh, long long ss, int bi,
                                     int h, int i) {
    return base + bi * sb + h * sh + i * ss;
}

// The index (b, h, i, j) of linear element e of the (b, hq, sq, skv) score matrix.
struct Elem {
    int bi, h, i, j;
};

template <class P>
__device__ __forceinline__ Elem decode(const P& p, long long e) {
    Elem r;
    r.j = (int)(e % p.skv);
    e /= p.skv;
    r.i = (int)(e % p.sq);
    e /= p.sq;
    r.h = (int)(e % p.hq);
    r.bi = (int)(e / p.hq);
    return r;
}

// Element e of a (b, hkv, skv, width) key-side gradient (dk, dv).
struct KeyElem {
    int bi, hk, j, c;
};

template <class P>
__device__ __forceinline__ KeyElem decode_key(const P& p, long long e, int width) {
    KeyElem r;
    r.c = (int)(e % width);
    e /= width;
    r.j = (int)(e % p.skv);
    e /= p.skv;
    r.hk = (int)(e % p.hkv);
    r.bi = (int)(e / p.hkv);
    return r;
}

template <typename A>
__device__ __forceinline__ A drop(const SdpaParamsT<A>& p, const Elem& x) {
    return p.drop_threshold ? sdpa::dropout_factor(p, x.bi, x.h, x.i, x.j) : A(1);
}

}  // namespace

template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_unfused_scores(const T* __restrict__ q, const T* __restrict__ k,
                        const void* __restrict__ mask, const int* lengths_q,
                        const int* lengths_kv, cl::acc_t<T>* __restrict__ s,
                        int mask_kind, SdpaParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const long long total = (long long)p.b * p.hq * p.sq * p.skv;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        const Elem x = decode(p, e);
        const sdpa::KeyRange r = sdpa::key_range(p, sdpa::lengths_of(p, lengths_q, lengths_kv, x.bi), x.i);
        A v = -INFINITY;
        if (x.j >= r.lo && x.j < r.hi) {
            const T* qi = row_ptr(q, p.q_sb, p.q_sh, p.q_ss, x.bi, x.h, x.i);
            const T* kj = row_ptr(k, p.k_sb, p.k_sh, p.k_ss, x.bi, x.h / p.group, x.j);
            A acc = A(0);
            for (int c = 0; c < p.d; ++c)
                acc = cl::math::fma(cl::to_acc(qi[c]), cl::to_acc(kj[c]), acc);
            v = acc * p.scale_log2;
            if (mask_kind == sdpa::kMaskBool) {
                if (!sdpa::mask_at<sdpa::kMaskBool, T>(p, mask, x.bi, x.h, x.i, x.j).keep) v = -INFINITY;
            } else if (mask_kind == sdpa::kMaskAdditive) {
                v += sdpa::mask_at<sdpa::kMaskAdditive, T>(p, mask, x.bi, x.h, x.i, x.j).add_log2;
            }
        }
        s[e] = v;
    }
}

// One warp per row; the row's scores become probabilities in place.
template <typename A>
__global__ void __launch_bounds__(256)
    sdpa_unfused_softmax(A* __restrict__ s, A* __restrict__ lse, SdpaParamsT<A> p) {
    const long long rows = (long long)p.b * p.hq * p.sq;
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    for (long long row = cl::global_thread_id() / 32; row < rows; row += warps) {
        A* r = s + row * p.skv;
        A m = -INFINITY;
        bool nan = false;
        for (int j = lane; j < p.skv; j += 32) {
            m = cl::math::fmax(m, r[j]);
            nan |= isnan(r[j]);
        }
        for (int o = 16; o > 0; o >>= 1) {
            m = cl::math::fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
            nan |= __shfl_xor_sync(0xffffffffu, (int)nan, o) != 0;
        }
        A sum = A(0);
        if (m != -INFINITY)
            for (int j = lane; j < p.skv; j += 32) sum += cl::math::exp2(r[j] - m);
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const A inv = m == -INFINITY ? A(0) : A(1) / sum;
        for (int j = lane; j < p.skv; j += 32) {
            const A v = m == -INFINITY ? A(0) : cl::math::exp2(r[j] - m) * inv;
            r[j] = nan ? A(NAN) : v;
        }
        if (lane == 0) {
            const A l2 = m == -INFINITY ? A(-INFINITY) : m + cl::math::log2(sum);
            lse[row] = nan ? A(NAN) : l2 * sdpa::Ln2<A>::value;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_unfused_pv(const cl::acc_t<T>* __restrict__ prob, const T* __restrict__ v,
                    T* __restrict__ o, SdpaParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const long long total = (long long)p.b * p.hq * p.sq * p.dv;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        const int c = (int)(e % p.dv);
        const long long row = e / p.dv;
        const Elem x = decode(p, row * p.skv);
        const A* pr = prob + row * p.skv;
        A acc = A(0);
        for (int j = 0; j < p.skv; ++j) {
            Elem y = x;
            y.j = j;
            const A pj = pr[j] * drop(p, y);
            acc = cl::math::fma(pj, cl::to_acc(row_ptr(v, p.v_sb, p.v_sh, p.v_ss, x.bi, x.h / p.group, j)[c]), acc);
        }
        row_ptr(o, p.o_sb, p.o_sh, p.o_ss, x.bi, x.h, x.i)[c] = cl::from_acc<T>(acc);
    }
}

// dv[b, hk, j, c] = sum over the group's heads h and rows i of P*drop * dout[i, c].
template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_unfused_dv(const cl::acc_t<T>* __restrict__ prob, const T* __restrict__ dout,
                    T* __restrict__ dv, SdpaParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const long long total = (long long)p.b * p.hkv * p.skv * p.dv;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        const KeyElem x = decode_key(p, e, p.dv);
        A acc = A(0);
        for (int h = x.hk * p.group; h < (x.hk + 1) * p.group; ++h)
            for (int i = 0; i < p.sq; ++i) {
                const A pr = prob[row_index(p, x.bi, h, i) * p.skv + x.j];
                const A f = drop(p, Elem{x.bi, h, i, x.j});
                const T* doi = row_ptr(dout, p.o_sb, p.o_sh, p.o_ss, x.bi, h, i);
                acc = cl::math::fma(pr * f, cl::to_acc(doi[x.c]), acc);
            }
        row_ptr(dv, p.v_sb, p.v_sh, p.v_ss, x.bi, x.hk, x.j)[x.c] = cl::from_acc<T>(acc);
    }
}

// P -> dS in place; dmask (additive masks) receives dS too.
template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_unfused_ds(cl::acc_t<T>* __restrict__ prob, const T* __restrict__ v,
                    const T* __restrict__ o, const T* __restrict__ dout,
                    cl::acc_t<T>* __restrict__ dmask, int write_dmask,
                    SdpaParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const long long total = (long long)p.b * p.hq * p.sq * p.skv;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        const Elem x = decode(p, e);
        const A pr = prob[e];
        A ds;
        {
            const T* doi = row_ptr(dout, p.o_sb, p.o_sh, p.o_ss, x.bi, x.h, x.i);
            const T* oi = row_ptr(o, p.o_sb, p.o_sh, p.o_ss, x.bi, x.h, x.i);
            const T* vj = row_ptr(v, p.v_sb, p.v_sh, p.v_ss, x.bi, x.h / p.group, x.j);
            A dp = A(0), delta = A(0);
            for (int c = 0; c < p.dv; ++c) {
                const A g = cl::to_acc(doi[c]);
                dp = cl::math::fma(g, cl::to_acc(vj[c]), dp);
                delta = cl::math::fma(g, cl::to_acc(oi[c]), delta);
            }
            ds = pr * (dp * drop(p, x) - delta);
        }
        prob[e] = ds;
        if (write_dmask) dmask[e] = ds;
    }
}

// dq[b, h, i, c] = scale * sum_j dS[i, j] k[j, c]
template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_unfused_dq(const cl::acc_t<T>* __restrict__ ds, const T* __restrict__ k,
                    T* __restrict__ dq, SdpaParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const long long total = (long long)p.b * p.hq * p.sq * p.d;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        const int c = (int)(e % p.d);
        const long long row = e / p.d;
        const Elem x = decode(p, row * p.skv);
        A acc = A(0);
        for (int j = 0; j < p.skv; ++j) {
            const A g = ds[row * p.skv + j];
            acc = cl::math::fma(g, cl::to_acc(row_ptr(k, p.k_sb, p.k_sh, p.k_ss, x.bi, x.h / p.group, j)[c]), acc);
        }
        row_ptr(dq, p.q_sb, p.q_sh, p.q_ss, x.bi, x.h, x.i)[c] = cl::from_acc<T>(acc * p.scale);
    }
}

// dk[b, hk, j, c] = scale * sum over the group's heads h and rows i of dS[i, j] q[i, c]
template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_unfused_dk(const cl::acc_t<T>* __restrict__ ds, const T* __restrict__ q,
                    T* __restrict__ dk, SdpaParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const long long total = (long long)p.b * p.hkv * p.skv * p.d;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        const KeyElem x = decode_key(p, e, p.d);
        A acc = A(0);
        for (int h = x.hk * p.group; h < (x.hk + 1) * p.group; ++h)
            for (int i = 0; i < p.sq; ++i) {
                const A g = ds[row_index(p, x.bi, h, i) * p.skv + x.j];
                acc = cl::math::fma(g, cl::to_acc(row_ptr(q, p.q_sb, p.q_sh, p.q_ss, x.bi, h, i)[x.c]), acc);
            }
        row_ptr(dk, p.k_sb, p.k_sh, p.k_ss, x.bi, x.hk, x.j)[x.c] = cl::from_acc<T>(acc * p.scale);
    }
}
