/* The codec's Snake activation in one pass: y = x + inverse * sin(alpha * x)^2, per channel.
 *
 * The Higgs decoder (and its acoustic encoder) writes each Snake as five ONNX ops over the whole signal, Sin and
 * Pow among them on one thread: an fp32 decoder takes 1.35 s for 10 s on the Zen 4, 0.87 s with this op. Snake(x [B,C,L], alpha [1,C,1],
 * inverse [1,C,1]) -> y [B,C,L] reads x once, on the session's threads. sin^2 needs no sign: the argument is
 * reduced by pi/2 (three-part Cody-Waite), and an odd quadrant takes cos^2 of the remainder; both by Cephes'
 * polynomials on [-pi/4, pi/4] (about 1e-7 relative). An input this kernel cannot take gives an output of NaN. */
#include <math.h>
#include <stdlib.h>

#include "kernels.h"

#define CHUNK 4096 /* samples a task takes */

typedef struct {
  const float *x, *alpha, *inverse;
  float* y;
  int64_t C, L, chunks;
} Call;

/* sin(t)^2 for 16 lanes */
ISA static inline __m512 sin_squared(__m512 t) {
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(0.63661977236758134f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.5703125f), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(4.837512969970703125e-4f), r);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(7.54978995489188216e-8f), r);
  __m512 z = _mm512_mul_ps(r, r);
  __m512 s = _mm512_fmadd_ps(z, _mm512_set1_ps(-1.9515295891e-4f), _mm512_set1_ps(8.3321608736e-3f));
  s = _mm512_fmadd_ps(z, s, _mm512_set1_ps(-1.6666654611e-1f));
  s = _mm512_fmadd_ps(_mm512_mul_ps(z, r), s, r);
  __m512 c = _mm512_fmadd_ps(z, _mm512_set1_ps(2.443315711809948e-5f), _mm512_set1_ps(-1.388731625493765e-3f));
  c = _mm512_fmadd_ps(z, c, _mm512_set1_ps(4.166664568298827e-2f));
  c = _mm512_fmadd_ps(_mm512_mul_ps(z, z), c, _mm512_fnmadd_ps(z, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.f)));
  __mmask16 odd = _mm512_test_epi32_mask(_mm512_cvtps_epi32(n), _mm512_set1_epi32(1));
  __m512 v = _mm512_mask_blend_ps(odd, s, c);
  return _mm512_mul_ps(v, v);
}

ISA static void snake_task(void* data, size_t task) {
  const Call* c = data;
  int64_t row = (int64_t)task / c->chunks, start = ((int64_t)task % c->chunks) * CHUNK;
  int64_t end = start + CHUNK < c->L ? start + CHUNK : c->L, channel = row % c->C;
  const float* x = c->x + row * c->L;
  float* y = c->y + row * c->L;
  __m512 alpha = _mm512_set1_ps(c->alpha[channel]), inverse = _mm512_set1_ps(c->inverse[channel]);
  for (int64_t i = start; i < end; i += 16) {
    __mmask16 in = first_lanes(end - i);
    __m512 v = _mm512_maskz_loadu_ps(in, x + i);
    _mm512_mask_storeu_ps(y + i, in, _mm512_fmadd_ps(inverse, sin_squared(_mm512_mul_ps(alpha, v)), v));
  }
}

static int per_channel(const int64_t* dims, size_t rank, int64_t C) {
  return rank == 3 && dims[0] == 1 && dims[1] == C && dims[2] == 1;
}

static void compute(void* self, OrtKernelContext* ctx) {
  (void)self;
  int64_t xd[MAX_RANK], ad[MAX_RANK], id[MAX_RANK];
  size_t xr, ar, ir;
  Call c = {0};
  c.x = op_input(ctx, 0, xd, &xr);
  c.alpha = op_input(ctx, 1, ad, &ar);
  c.inverse = op_input(ctx, 2, id, &ir);
  int fits = xr == 3 && per_channel(ad, ar, xd[1]) && per_channel(id, ir, xd[1]);
  int64_t none[1] = {0};
  c.y = op_output(ctx, 0, xr == 3 ? xd : none, xr == 3 ? 3 : 1);
  if (xr != 3) return;
  if (!fits) {
    for (int64_t i = 0; i < xd[0] * xd[1] * xd[2]; i++) c.y[i] = NAN;
    return;
  }
  c.C = xd[1];
  c.L = xd[2];
  c.chunks = (c.L + CHUNK - 1) / CHUNK;
  if (xd[0] * c.C * c.L == 0) return;
  op_parallel(ctx, snake_task, (size_t)(xd[0] * c.C * c.chunks), &c);
}

static void* create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  (void)op;
  (void)api;
  (void)info;
  return calloc(1, 1);
}

static const int inputs[] = {FLOAT, FLOAT, FLOAT}, outputs[] = {FLOAT};
Op snake_op = {.base = {.CreateKernel = create_kernel, .KernelCompute = compute, .KernelDestroy = free},
               .name = "Snake", .inputs = 3, .outputs = 1, .input_types = inputs, .output_types = outputs};
