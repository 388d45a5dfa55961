/* moe/kern.h -- the reference kernels of moe-run: the math of one MoE layer on token rows.
 * Installed with libmoerun (pkg-config moerun): the CPU backend, the CUDA kernels' tests and a
 * backend of one's own (moe/run_backend.h) compute and test against these definitions.
 *
 * These are the C definitions every moe-run backend computes (the MPI CPU backend calls them
 * directly; the CUDA kernels in kernels/ have the same meaning and are tested against them).
 * Activations are fp32 rows of H floats, row-major, accumulation is fp32 throughout. The
 * runtime decides on the host which rows go where (index arrays, per-expert row offsets,
 * combine targets and weights); the kernels only move and compute rows. None of them prints,
 * exits, or keeps state between calls. */
#ifndef MOE_KERN_H
#define MOE_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "moe/moe.h"
#include "moe/run_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ wire data types
 * enum moe_dtype and moe_dtype_size/name/parse: moe/run_backend.h. */

/* fp32 -> bf16 bits, round to nearest even; Inf stays Inf, NaN stays a (quiet) NaN of the same
 * sign, values past the bf16 range round to Inf, subnormals round like any other value. */
uint16_t moe_f32_to_bf16(float f);
/* bf16 bits -> fp32 (exact). */
float moe_bf16_to_f32(uint16_t h);
/* fp32 -> IEEE binary16 bits, round to nearest even: |f| >= 65520 gives Inf, values below the
 * smallest normal (2^-14) give fp16 subnormals, |f| <= 2^-25 gives a signed zero, NaN stays a
 * quiet NaN of the same sign keeping its top payload bits. */
uint16_t moe_f32_to_f16(float f);
/* IEEE binary16 bits -> fp32 (exact, subnormals included). */
float moe_f16_to_f32(uint16_t h);

/* Convert n floats to the wire dtype at dst (n * moe_dtype_size(dtype) bytes). Returns 0 or
 * MOE_EINVAL for an unknown dtype. src and dst must not overlap. */
int moe_kern_pack(const float *src, size_t n, int dtype, void *dst);
/* Convert n wire values of dtype at src back to floats. Returns 0 or MOE_EINVAL. */
int moe_kern_unpack(const void *src, size_t n, int dtype, float *dst);

/* ------------------------------------------------------------------ layer steps */

/* Step 1, the mixer that stands in for attention, on n rows of x in place:
 * x[h] += 0.25f * tanhf(m[h] * x[h]). */
void moe_kern_mixer(float *x, size_t n, uint32_t H, const float *m);

/* Step 2, the computed gate on n rows of x (H floats each): logit[e] = sum_h x[h] * Wg[h*E+e]
 * (Wg is H x E row-major); ids[i*K..] = the K largest logits in descending order, ties to the
 * lower expert id; w[i*K..] = softmax over those K logits. 1 <= K <= E. Needs E floats of
 * scratch, allocated once per call. Returns 0, MOE_EINVAL (bad K) or MOE_ENOMEM. */
int moe_kern_gate(const float *x, size_t n, uint32_t H, const float *Wg, uint32_t E, uint32_t K,
                  int32_t *ids, float *w);

/* The permute: dst row i = src row idx[i], i < n (rows of H floats). dst must not overlap
 * src. */
void moe_kern_gather(const float *src, const uint32_t *idx, size_t n, uint32_t H, float *dst);

/* The combine / un-permute: out row idx[i] += w[i] * y row i, applied in increasing i (the
 * order matters in fp32 when several rows hit the same target). w == NULL means weight 1. y
 * and out must not overlap. */
void moe_kern_scatter_add(const float *y, const uint32_t *idx, const float *w, size_t n,
                          uint32_t H, float *out);

/* Step 3's expert, of kind expert (enum moe_expert, moe/moe.h), with W1 H x C and W2 F x H
 * row-major, C = moe_kern_w1_cols(F, expert):
 *   SiLU:   C = F,  x^ = x, a = x^ W1, y = silu(a) W2;
 *   SwiGLU: C = 2F, row h of W1 holds Wg's row h then Wu's (the merged gate and up projections
 *           of vLLM's w13 and SGLang's gate_up_proj, transposed to H x 2F), on the row
 *           normalised as an MoE block's input is (RMS norm without a learned scale; row-local,
 *           so the serving rank computes it on the row it receives): x^ = x r, r = 1 /
 *           sqrt(sum_h x[h]^2 / H + 1e-6), a = x^ W1 = [g | u], y = (silu(g) * u) W2.
 *           Without the norm its output grows with the square of its input and the residual
 *           rows overflow within about ten layers.
 * a[c] = sum_h x^[h] W1[h*C+c] (h ascending), y[h] = sum_f act[f] W2[f*H+h] (f ascending),
 * silu(z) = z / (1 + exp(-z)). */
/* Columns of W1 (pre-activations per row): F for SiLU, 2F for SwiGLU. */
size_t moe_kern_w1_cols(uint32_t F, int expert);
/* Floats of one expert's weights, W1 then W2: moe_expert_mats(expert) * H * F. */
size_t moe_kern_expert_floats(uint32_t H, uint32_t F, int expert);

/* Floats of scratch moe_kern_ffn and moe_kern_ffn_grouped need for inner size F (either
 * kind). */
size_t moe_kern_ffn_work_size(uint32_t F);

/* Step 3, one expert on n rows: y = the expert of kind expert on x (above). y is overwritten
 * and must not overlap x. Each pre-activation and each output is one float sum, over h (resp.
 * f) ascending, so a row's result does not depend on n or on the other rows; the work runs in
 * blocks of rows and tiles of outputs held in registers. work holds moe_kern_ffn_work_size(F)
 * floats, or is NULL to allocate it for this call. Returns 0, MOE_EINVAL (an unknown kind) or
 * MOE_ENOMEM. */
int moe_kern_ffn(const float *x, size_t n, uint32_t H, uint32_t F, int expert, const float *W1,
                 const float *W2, float *y, float *work);

/* Grouped step 3 over G experts in the expert-sorted layout: rows off[g] .. off[g+1]-1 of x
 * (off has G+1 ascending entries, off[0] usually 0) go through expert g with weights W1[g],
 * W2[g]; results land in the same rows of y. Groups with no rows are skipped (their weight
 * pointers may be NULL). work as for moe_kern_ffn. Returns 0, MOE_EINVAL (descending
 * offsets, an unknown kind) or MOE_ENOMEM. */
int moe_kern_ffn_grouped(const float *x, uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                         int expert, const float *const *W1, const float *const *W2, float *y,
                         float *work);
/* moe_kern_ffn_grouped that also writes each row's pre-activations a = x^ W1
 * (moe_kern_w1_cols(F, expert) floats, before the activation) into the same row of act, for
 * a backward that keeps them instead of recomputing them (MPMoE's T_M). act NULL:
 * moe_kern_ffn_grouped. */
int moe_kern_ffn_grouped_act(const float *x, uint32_t G, const size_t *off, uint32_t H,
                             uint32_t F, int expert, const float *const *W1,
                             const float *const *W2, float *y, float *act, float *work);

/* ------------------------------------------------------------------ seeded model */

/* The weights and tokens are identical on every rank and backend: generated in double from
 * moe_rng streams, stored as float. Layer l's generator for slot s is seeded
 * moe_hash64(seed, l * (E + 2) + s), with s = e for expert e, E for the gate, E + 1 for the
 * mixer. */

/* Expert e of layer l: W1 (H x moe_kern_w1_cols(F, expert)) then W2 (F x H) drawn row-major
 * from one stream as moe_rng_normal / sqrt(fan_in), fan_in H for W1 and F for W2. */
void moe_kern_init_expert(uint64_t seed, uint32_t l, uint32_t e, uint32_t E, uint32_t H,
                          uint32_t F, int expert, float *W1, float *W2);
/* Gate of layer l: Wg (H x E) row-major, moe_rng_normal / sqrt(H). */
void moe_kern_init_gate(uint64_t seed, uint32_t l, uint32_t E, uint32_t H, float *Wg);
/* Mixer of layer l: m[h] = moe_rng_normal, h < H. */
void moe_kern_init_mixer(uint64_t seed, uint32_t l, uint32_t E, uint32_t H, float *m);
/* Input row of token id t (its index in the global token stream): x[h] = moe_rng_normal of a
 * generator seeded moe_hash64(seed ^ 0x9e3779b97f4a7c15, t). */
void moe_kern_init_token(uint64_t seed, uint64_t t, uint32_t H, float *x);
/* Training's target row of token t (the loss is the mean squared error against it):
 * moe_kern_init_token's row with the seed XORed with 0x2545f4914f6cdd1d. */
void moe_kern_init_target(uint64_t seed, uint64_t t, uint32_t H, float *x);
/* n consecutive token rows, token ids t0 .. t0+n-1, into x (n x H). */
void moe_kern_init_tokens(uint64_t seed, uint64_t t0, size_t n, uint32_t H, float *x);

/* ------------------------------------------------------------------ backward (training) */

/* The reference backward of each step, for training (moe-run --train) and the GPU kernels'
 * tests. Gradients are "+=" into weight gradients (the caller zeroes them) and as documented
 * for row gradients. */

/* Backward of step 1: x are the n rows before the mixer, dy the gradient of the rows after it;
 * dx = dy * (1 + 0.25 m (1 - t^2)) with t = tanh(m x) is written to dx (which may be dy);
 * dm[h] += sum over rows of dy * 0.25 x (1 - t^2) (dm may be NULL). */
void moe_kern_mixer_backward(const float *x, size_t n, uint32_t H, const float *m,
                             const float *dy, float *dx, float *dm);

/* Backward of the combine in gather form (x row i += sum over k of w[i K + k] * y row
 * slot[i K + k], as moe_gpu_combine; slot UINT32_MAX: none), dx the gradient of the combined
 * rows: dy row slot[i K + k] = w[i K + k] * dx row i (each slot is one choice's: written,
 * not added; dy rows no choice names are left as they are), dw[i K + k] += dx row i . y row
 * slot[i K + k] (summed in ascending h; dw may be NULL). The permute's backward, the
 * gradient of the dispatched rows back to their tokens, is the combine itself with unit
 * weights. */
void moe_kern_combine_backward(const float *dx, const float *y, const uint32_t *slot,
                               const float *w, size_t n, uint32_t K, uint32_t H, float *dy,
                               float *dw);

/* Backward of step 2 through the softmax over the chosen logits, for the routing moe_kern_gate
 * returned (ids, w) and dw, the gradient of the K weights of each row: dlogit_k =
 * w_k (dw_k - sum_j w_j dw_j); dx[h] += sum_k dlogit_k Wg[h E + ids_k] and dWg[h E + ids_k]
 * += x[h] dlogit_k (either may be NULL). The choice itself has no gradient. Rows whose
 * ids[0] < 0 (a missing cell) are skipped. */
void moe_kern_gate_backward(const float *x, size_t n, uint32_t H, const float *Wg, uint32_t E,
                            uint32_t K, const int32_t *ids, const float *w, const float *dw,
                            float *dx, float *dWg);

/* Floats of scratch moe_kern_ffn_backward needs for sizes H and F (either kind): one block of
 * rows' buffers, nothing that grows with the weights (no per-call copy of them). */
size_t moe_kern_ffn_backward_work_size(uint32_t H, uint32_t F);
/* Backward of step 3 on n rows of one expert, dy the gradient of y: recomputes a = x^ W1, then
 * with act the expert's hidden activation (silu(a), or silu(g) * u) and dact = dy W2^T:
 * dW2 += act^T dy, da = dact * act'(a) (SwiGLU: dg = dact u silu'(g), du = dact silu(g)),
 * dW1 += (x^)^T da, dx += da W1^T (SwiGLU: through the norm, with dn = da W1^T, dx += r (dn -
 * x^ (x^ . dn) / H)) (each pointer may be NULL). work:
 * moe_kern_ffn_backward_work_size(H, F) floats, or NULL to allocate. Returns 0, MOE_EINVAL (an
 * unknown kind) or MOE_ENOMEM. */
int moe_kern_ffn_backward(const float *x, size_t n, uint32_t H, uint32_t F, int expert,
                          const float *W1, const float *W2, const float *dy, float *dx,
                          float *dW1, float *dW2, float *work);
/* moe_kern_ffn_backward of a row-scaled expert, y_i' = s[i] y_i (the routing weight), with the
 * pre-activations a (n x moe_kern_w1_cols(F, expert), as moe_kern_ffn_grouped_act wrote
 * them) given instead of recomputed when a is not NULL. The gradient taken through y_i' is
 * s[i] dy_i (s NULL: 1); ds[i] += dy_i . y_i, the gradient of s[i], when ds is not NULL,
 * computed from a and the products the backward forms anyway (no second forward). Same work
 * and returns. */
int moe_kern_ffn_backward_scaled(const float *x, const float *a, size_t n, uint32_t H,
                                 uint32_t F, int expert, const float *W1, const float *W2,
                                 const float *dy, const float *s, float *dx, float *dW1,
                                 float *dW2, float *ds, float *work);

/* The mean squared error's part of n rows y (n x H) against their targets t: *sum = the sum
 * of (y - t)^2 / 2 over every value, in double, and dy = (y - t) * scale, the loss's gradient
 * when the loss is that sum times scale (dy may be y). */
void moe_kern_loss_grad(const float *y, const float *t, size_t n, uint32_t H, double scale,
                        float *dy, double *sum);
/* One optimizer step of n weights w from their gradients g at learning rate lr: SGD (adam 0; m
 * and v unused), or Adam (beta1 0.9, beta2 0.999, eps 1e-8) at step t (from 1) with bias
 * correction, the moments m and v updated in place. */
void moe_kern_update(int adam, int t, float lr, float *w, const float *g, float *m, float *v,
                     size_t n);

/* The serial reference model with a computed gate: L layers of mixer, gate and E experts, the
 * seeded weights of moe_kern_init_* (or zeros, as a gradient). */
typedef struct moe_kern_model {
    uint32_t L, E, K, H, F;
    int expert; /* enum moe_expert */
    float *m;   /* [L][H] mixers */
    float *Wg;  /* [L][H][E] gates */
    float *W;   /* [L][E] experts: W1 then W2, moe_kern_expert_floats each; moe_kern_model_w1 */
} moe_kern_model_t;

/* Allocate md and seed it as moe-run does (seed 0: all zeros, for gradients). Returns 0,
 * MOE_EINVAL (a zero size, K > E or an unknown kind) or MOE_ENOMEM. */
int moe_kern_model_init(moe_kern_model_t *md, uint64_t seed, uint32_t L, uint32_t E, uint32_t K,
                        uint32_t H, uint32_t F, int expert);
void moe_kern_model_free(moe_kern_model_t *md);
/* W1 of expert e in layer l (its W2 follows at + H * moe_kern_w1_cols(F, expert)). */
float *moe_kern_model_w1(const moe_kern_model_t *md, uint32_t l, uint32_t e);

/* n rows x0 (n x H) through every layer (mixer, gate, experts, the weighted combine added to
 * the rows), then the loss against target (n x H): *loss = sum (y - target)^2 / (2 n H), summed
 * in double. With grad (of md's shape; zeroed here): every weight's gradient, and with dx0
 * (n x H) the inputs' gradient. Returns 0, MOE_EINVAL or MOE_ENOMEM. */
int moe_kern_model_loss_grad(const moe_kern_model_t *md, const float *x0, size_t n,
                             const float *target, double *loss, moe_kern_model_t *grad,
                             float *dx0);
/* The same with the routing given, as a replayed trace gives it: ids and w [n][L][K] (token
 * major), expert ids < 0 for a missing cell (the token skips that layer's experts); the gate is
 * then unused and its gradient zero. */
int moe_kern_model_loss_grad_routed(const moe_kern_model_t *md, const float *x0, size_t n,
                                    const float *target, const int32_t *ids, const float *w,
                                    double *loss, moe_kern_model_t *grad, float *dx0);

/* One layer of the serial model from given state, for a check that follows a distributed run
 * layer by layer (so that its rounding and its routing do not add up over the layers): rows
 * xin (n x H) enter layer l with the routing ids (n x K; a first id < 0: the row skips the
 * experts) and either the weights w (n x K: a replayed gate, whose gradient is then zero) or,
 * w NULL, the gate's softmax over the logits of the given experts (so the gate's gradient
 * flows as when it chose them); dy (n x H) is the gradient of the layer's output rows. Adds
 * layer l's gradients (mixer, gate, experts) to grad, of md's shape, and writes the input
 * rows' gradient to dx (n x H), and with y (n x H, or NULL) the layer's own output rows, from
 * which a check can derive the loss's gradient independently of the run it checks. Returns 0,
 * MOE_EINVAL or MOE_ENOMEM. */
int moe_kern_model_layer_grad(const moe_kern_model_t *md, uint32_t l, const float *xin, size_t n,
                              const int32_t *ids, const float *w, const float *dy,
                              moe_kern_model_t *grad, float *dx, float *y);

#ifdef __cplusplus
}
#endif
#endif
