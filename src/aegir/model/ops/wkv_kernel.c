/* The RWKV-7 wkv recurrence (and, at the end of the file, H-Net's dechunk EMA) as sequential CPU
   kernels, float32 (aegir.model.ops.wkv_cpu).

   Per batch row and head, with the state S a (K, K) matrix held row-major (row i = key channel):

       z_t = S_{t-1}^T a_t
       S_t = diag(w_t) S_{t-1} + b_t z_t^T + k_t v_t^T
       o_t = S_t^T r_t

   w is the decay itself (the caller clamps and exponentiates). Inputs r, w, k, v, a, b are
   (B, T, H, K) and contiguous, the state (B, H, K, K). The forward keeps the state of every
   (row, head) in a local array and, one step at a time, writes S_t, o_t and z_{t+1} in a single
   pass over S. For the backward it stores z_t of every step (`zs`, the inputs' shape) and S at
   the start of every chunk of L steps, transposed (`ckpt`, (B, H, N, K, K), N = ceil(T / L)).
   The backward recomputes a chunk's states from there (no sums: z_t is stored) and walks them
   in reverse, with states and gradients transposed, in two passes over the state per step: the
   dot products dz_t and dv_t first (as dS_tᵀ b_t + do_t (r_t·b_t), and likewise for k, so that
   they do not wait on each other), then every per-key gradient and dS_{t-1}, VW keys at a time
   with their sums in registers:

       dS_t += r_t do_t^T                     (the output's share)
       dr_t = S_t do_t,  dw_t = rowsum(dS_t ⊙ S_{t-1}),  db_t = dS_t z_t,  dk_t = dS_t v_t
       dz_t = dS_t^T b_t,  dv_t = dS_t^T k_t,  da_t = S_{t-1} dz_t
       dS_{t-1} = diag(w_t) dS_t + a_t dz_t^T

   Every loop order is fixed, so a result depends only on the inputs, not on how the batch rows
   are split between calls. One function pair per head size (16, 32, 64), so that the compiler
   sees the vector width. The vector types are GCC's and Clang's extension. */

#include <stdlib.h>
#include <string.h>

/* VW floats as one value (GCC/Clang vector extension), VW the width of the machine's widest
   vector register: 16 with AVX-512, 8 with AVX, else 4 (SSE, NEON). The backward's inner loop
   keeps 11 such values live (5 accumulators, 3 per-key constants, 3 state slices): with 16-float
   values on a machine of 256-bit registers each is two registers, 22 do not fit in its 16, and
   the spills made the backward 4-5x slower (docs/benchmarks.md, "The CPU kernels on AVX2"). */
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
#if defined(__AVX512F__)
#define VW 16
typedef float vec __attribute__((vector_size(64)));
#elif defined(__AVX__)
#define VW 8
typedef v8 vec;
#else
#define VW 4
typedef v4 vec;
#endif
static inline vec ldv(const float *p) { vec x; memcpy(&x, p, sizeof x); return x; }
static inline void stv(float *p, vec x) { memcpy(p, &x, sizeof x); }

/* The sum of x's lanes as a tree (halves added, then quarters, …): a few independent
   instructions, where a loop's sum in lane order is a chain of VW − 1 dependent additions. */
static inline float hsum(vec x) {
#if VW == 16
    v8 lo, hi;
    memcpy(&lo, &x, sizeof lo); memcpy(&hi, (char *)&x + sizeof lo, sizeof hi);
    const v8 s8 = lo + hi;
#endif
#if VW >= 8
#if VW == 8
    const v8 s8 = x;
#endif
    v4 lo4, hi4;
    memcpy(&lo4, &s8, sizeof lo4); memcpy(&hi4, (const char *)&s8 + sizeof lo4, sizeof hi4);
    const v4 s4 = lo4 + hi4;
#else
    const v4 s4 = x;
#endif
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
#define AT(b, t, h, T, H, X) ((((size_t)(b) * (T) + (t)) * (H) + (h)) * (X))

#define DEFINE_WKV(KD)                                                                             \
static inline void step_##KD(float *restrict S, const float *restrict z, float *restrict z_next,   \
                             float *restrict o, const float *restrict wt, const float *restrict bt, \
                             const float *restrict kt, const float *restrict vt,                   \
                             const float *restrict rt, const float *restrict a_next) {             \
    for (int j = 0; j < KD; j++) { z_next[j] = 0.f; o[j] = 0.f; }                                  \
    for (int i = 0; i < KD; i++) {                                                                 \
        const float wi = wt[i], bi = bt[i], ki = kt[i], ri = rt[i], ai = a_next[i];                \
        float *Si = S + i * KD;                                                                    \
        _Pragma("omp simd")                                                                        \
        for (int j = 0; j < KD; j++) {                                                             \
            const float x = wi * Si[j] + bi * z[j] + ki * vt[j];                                   \
            Si[j] = x; o[j] += ri * x; z_next[j] += ai * x;                                        \
        }                                                                                          \
    }                                                                                              \
}                                                                                                  \
                                                                                                   \
static void first_z_##KD(const float *restrict S, const float *restrict a0, float *restrict z) {  \
    for (int j = 0; j < KD; j++) z[j] = 0.f;                                                       \
    for (int i = 0; i < KD; i++) {                                                                 \
        const float ai = a0[i];                                                                    \
        _Pragma("omp simd")                                                                        \
        for (int j = 0; j < KD; j++) z[j] += ai * S[i * KD + j];                                   \
    }                                                                                              \
}                                                                                                  \
                                                                                                   \
static void transpose_##KD(const float *restrict src, float *restrict dst) {                      \
    for (int i = 0; i < KD; i++)                                                                   \
        for (int j = 0; j < KD; j++) dst[j * KD + i] = src[i * KD + j];                            \
}                                                                                                  \
                                                                                                   \
int wkv_forward_##KD(int B, int T, int H, int L, const float *restrict r, const float *restrict w, \
                     const float *restrict k, const float *restrict v, const float *restrict a,    \
                     const float *restrict b, float *restrict state, float *restrict out,          \
                     float *restrict ckpt, float *restrict zs) {                                   \
    const int N = (T + L - 1) / L;                                                                 \
    const size_t KV = (size_t)KD * KD;                                                             \
    float S[KD * KD], z[KD], z_next[KD];                                                           \
    for (int bi = 0; bi < B; bi++)                                                                 \
        for (int h = 0; h < H; h++) {                                                              \
            float *Sg = state + ((size_t)bi * H + h) * KV;                                         \
            memcpy(S, Sg, sizeof S);                                                               \
            if (T > 0) first_z_##KD(S, a + AT(bi, 0, h, T, H, KD), z);                            \
            for (int t = 0; t < T; t++) {                                                          \
                const size_t p = AT(bi, t, h, T, H, KD);                                           \
                if (ckpt && t % L == 0) /* stored transposed: the backward walks columns */       \
                    transpose_##KD(S, ckpt + (((size_t)bi * H + h) * N + t / L) * KV);             \
                if (zs) memcpy(zs + p, z, sizeof z);                                               \
                const size_t p_next = t + 1 < T ? AT(bi, t + 1, h, T, H, KD) : p;                  \
                step_##KD(S, z, z_next, out + p, w + p, b + p, k + p, v + p, r + p, a + p_next);   \
                memcpy(z, z_next, sizeof z);                                                       \
            }                                                                                      \
            memcpy(Sg, S, sizeof S);                                                               \
        }                                                                                          \
    return 0;                                                                                      \
}                                                                                                  \
                                                                                                   \
/* The backward holds states and their gradient transposed (ST[j][i] = S[i][j]): then every   \
   per-key reduction (dr, dw, db, dk, da) is a vector accumulated over j, and only dz_j and    \
   dv_j are sums across a vector; one pass over the state per step does all of it. */          \
int wkv_backward_##KD(int B, int T, int H, int L, const float *restrict r,                         \
                      const float *restrict w, const float *restrict k, const float *restrict v,   \
                      const float *restrict a, const float *restrict b,                            \
                      const float *restrict ckpt, const float *restrict zs,                        \
                      const float *restrict dout, float *restrict dstate, float *restrict dr,      \
                      float *restrict dw, float *restrict dk, float *restrict dv,                  \
                      float *restrict da, float *restrict db) {                                    \
    const int N = (T + L - 1) / L;                                                                 \
    const size_t KV = (size_t)KD * KD;                                                             \
    float *states = malloc(sizeof(float) * KV * (size_t)(L + 1));  /* S_{t0-1} … S_{t0+L-1}, ᵀ */  \
    if (!states) return -1;                                                                        \
    float dST[KD * KD], dz[KD];                                                                    \
    for (int bi = 0; bi < B; bi++)                                                                 \
        for (int h = 0; h < H; h++) {                                                              \
            float *dSg = dstate + ((size_t)bi * H + h) * KV;                                       \
            transpose_##KD(dSg, dST);                                                              \
            for (int n = N - 1; n >= 0; n--) {                                                     \
                const int t0 = n * L, t1 = t0 + L < T ? t0 + L : T;                                \
                memcpy(states, ckpt + (((size_t)bi * H + h) * N + n) * KV, sizeof dST);            \
                for (int t = t0; t < t1; t++) {  /* S_t = diag(w) S + b zᵀ + k vᵀ, transposed */    \
                    const float *STp = states + (size_t)(t - t0) * KV;                             \
                    float *ST = states + (size_t)(t - t0 + 1) * KV;                                \
                    const size_t p = AT(bi, t, h, T, H, KD);                                       \
                    const float *wt = w + p, *bt = b + p, *kt = k + p, *zt = zs + p, *vt = v + p;  \
                    for (int j = 0; j < KD; j++) {                                                 \
                        const float zj = zt[j], vj = vt[j];                                        \
                        _Pragma("omp simd")                                                        \
                        for (int i = 0; i < KD; i++)                                               \
                            ST[j * KD + i] = wt[i] * STp[j * KD + i] + bt[i] * zj + kt[i] * vj;    \
                    }                                                                              \
                }                                                                                  \
                for (int t = t1 - 1; t >= t0; t--) {                                               \
                    const float *ST = states + (size_t)(t - t0 + 1) * KV, *STp = ST - KV;          \
                    const size_t p = AT(bi, t, h, T, H, KD);                                       \
                    const float *dO = dout + p, *rt = r + p, *wt = w + p, *kt = k + p;             \
                    const float *at = a + p, *bt = b + p, *zt = zs + p, *vt = v + p;               \
                    /* dz_j = Σ_i g_ji b_i, dv_j = Σ_i g_ji k_i with g = dSᵀ + do rᵀ: split as        \
                       dSᵀ b + do (r·b), so that the 2K dot products are independent of each other */ \
                    vec rbv = {0}, rkv = {0};                                                    \
                    for (int c = 0; c < KD; c += VW) {                                             \
                        const vec rc = ldv(rt + c);                                               \
                        rbv += rc * ldv(bt + c); rkv += rc * ldv(kt + c);                      \
                    }                                                                              \
                    const float rb = hsum(rbv), rk = hsum(rkv);                              \
                    for (int j = 0; j < KD; j++) {                                                 \
                        const float *dSTj = dST + j * KD;                                          \
                        vec sb = {0}, sk = {0};                                                    \
                        for (int c = 0; c < KD; c += VW) {                                         \
                            const vec d = ldv(dSTj + c);                                          \
                            sb += d * ldv(bt + c); sk += d * ldv(kt + c);                        \
                        }                                                                          \
                        dz[j] = hsum(sb) + dO[j] * rb;                                           \
                        dv[p + j] = hsum(sk) + dO[j] * rk;                                       \
                    }                                                                              \
                    /* then, per slice of VW keys (its accumulators in registers), every row j */  \
                    for (int c = 0; c < KD; c += VW) {                                             \
                        const vec rc = ldv(rt + c), wc = ldv(wt + c), ac = ldv(at + c);         \
                        vec ar = {0}, aw = {0}, ab = {0}, ak = {0}, aa = {0};                      \
                        for (int j = 0; j < KD; j++) {                                             \
                            const float doj = dO[j], zj = zt[j], vj = vt[j], dzj = dz[j];          \
                            float *dSTj = dST + j * KD + c;                                        \
                            const vec s = ldv(ST + j * KD + c), sp = ldv(STp + j * KD + c);      \
                            const vec g = ldv(dSTj) + rc * doj;  /* dS_t with the output's share */ \
                            ar += s * doj; aw += g * sp; ab += g * zj; ak += g * vj; aa += sp * dzj; \
                            stv(dSTj, wc * g + ac * dzj);  /* dS_{t-1} */                         \
                        }                                                                          \
                        stv(dr + p + c, ar); stv(dw + p + c, aw); stv(db + p + c, ab);          \
                        stv(dk + p + c, ak); stv(da + p + c, aa);                                \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            transpose_##KD(dST, dSg);                                                              \
        }                                                                                          \
    free(states);                                                                                  \
    return 0;                                                                                      \
}

DEFINE_WKV(16)
DEFINE_WKV(32)
DEFINE_WKV(64)

/* The dechunk EMA of H-Net (aegir.model.chunking), per batch row, over L chunks of width D:

       out_j = p_j z_j + (1 − p_j) out_{j−1},  out_{−1} = 0

   z, out: (B, L, D), p: (B, L), contiguous. Its backward, with g_j the whole gradient reaching
   out_j (g_j = dout_j + (1 − p_{j+1}) g_{j+1}), walks the chunks in reverse:

       dz_j = p_j g_j,  dp_j = Σ_d g_j (z_j − out_{j−1})

   Linear in L where the closed form (`ema_parallel`) builds an (L, L) weighting per row. */

int ema_forward(int B, int L, int D, const float *restrict z, const float *restrict p,
                float *restrict out) {
    for (int bi = 0; bi < B; bi++) {
        const float *zb = z + (size_t)bi * L * D, *pb = p + (size_t)bi * L;
        float *ob = out + (size_t)bi * L * D;
        for (int j = 0; j < L; j++) {
            const float pj = pb[j], qj = 1.f - pj;
            const float *zj = zb + (size_t)j * D;
            float *oj = ob + (size_t)j * D;
            if (j == 0) {
                for (int d = 0; d < D; d++) oj[d] = pj * zj[d];
            } else {
                const float *prev = oj - D;
                _Pragma("omp simd")
                for (int d = 0; d < D; d++) oj[d] = pj * zj[d] + qj * prev[d];
            }
        }
    }
    return 0;
}

int ema_backward(int B, int L, int D, const float *restrict z, const float *restrict p,
                 const float *restrict out, const float *restrict dout, float *restrict dz,
                 float *restrict dp) {
    float *g = malloc(sizeof(float) * (size_t)(D > 0 ? D : 1));
    if (!g) return -1;
    for (int bi = 0; bi < B; bi++) {
        const size_t row = (size_t)bi * L * D;
        const float *pb = p + (size_t)bi * L;
        for (int d = 0; d < D; d++) g[d] = 0.f;
        for (int j = L - 1; j >= 0; j--) {
            const float pj = pb[j], carry = j + 1 < L ? 1.f - pb[j + 1] : 0.f;
            const float *zj = z + row + (size_t)j * D, *dj = dout + row + (size_t)j * D;
            float *dzj = dz + row + (size_t)j * D;
            float acc = 0.f;
            if (j > 0) {
                const float *prev = out + row + (size_t)(j - 1) * D;
                _Pragma("omp simd reduction(+:acc)")
                for (int d = 0; d < D; d++) {
                    const float gd = dj[d] + carry * g[d];
                    g[d] = gd; dzj[d] = pj * gd; acc += gd * (zj[d] - prev[d]);
                }
            } else {
                _Pragma("omp simd reduction(+:acc)")
                for (int d = 0; d < D; d++) {
                    const float gd = dj[d] + carry * g[d];
                    g[d] = gd; dzj[d] = pj * gd; acc += gd * zj[d];
                }
            }
            dp[(size_t)bi * L + j] = acc;
        }
    }
    free(g);
    return 0;
}
