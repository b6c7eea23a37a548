/* Bidirectional grouped-query attention for ONNX Runtime's CPU provider, at the integer rate.
 *
 * The op ai.omnivoice::BidirectionalAttention stands where the genai backbone's GroupQueryAttention stood
 * (codes/runtime/contract/fused_attention.py rewrites the graph at load) and computes what it computes for a
 * first prompt: rotary positions 0..S-1 (half-split, not interleaved), keys past seqlens_k[b] masked, the
 * additive bias, softmax, P·V. Inputs: query [B,S,H*D], key and value [B,S,Hk*D], seqlens_k int32 [B],
 * cos_cache and sin_cache [P,D/2], attention_bias [B or 1,1,S,S]. Output [B,S,H*D].
 * Or, as the projections leave them (fused_attention.py's pack): key and value absent, query the packed
 * [B,S,(H+2Hk)*D] of the qkv GEMM, with the optional row_scale [B,S,1] its output is multiplied by, and the
 * optional q_norm and k_norm weights [D] of the per-head RMSNorm (attribute epsilon) before rotary: the split,
 * the scaling and the norms then cost no pass of their own.
 *
 * Q·Kᵀ runs in int8 (vpdpbusd): K smoothed by its mean over the valid keys (every score of a row moves by the
 * same amount, which softmax ignores), then each query and key row scaled to +-127. P·V runs in bf16
 * (vdpbf16ps) with fp32 sums. One pass per block of query rows: scores, softmax and P·V stay in cache.
 * Needs AVX-512 with VNNI and BF16 (library.c); elsewhere the runtime keeps GroupQueryAttention. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#define LANES 16
#include "lanes.h"

#define ROWS 4      /* query rows a register block holds */
#define TASK_ROWS 32 /* query rows a task takes */
#define KEYS 64     /* keys a score block holds (Sp is a multiple) */

typedef struct {
  int64_t heads, kv_heads;
  float scale, epsilon;
} Kernel;

typedef struct {
  const float *q, *k, *v, *cosc, *sinc, *bias;
  const float *row_scale, *q_gamma, *k_gamma; /* each NULL where absent */
  const int32_t* seqlens;
  float* out;
  int64_t B, S, H, Hk, D, Sp, bias_batch, q_ld, kv_ld; /* q_ld, kv_ld: floats from one token's row to the next */
  float scale, epsilon;
  int8_t* kq;      /* [B][Hk][Sp/16][D/4][16][4] */
  float* kscale;   /* [B][Hk][Sp] */
  int32_t* ksum;   /* [B][Hk][Sp] */
  uint16_t* vb;    /* [B][Hk][Sp/2][D][2] bf16 */
} Call;

/* x [D] at position pos, rotated half-split into r; returns max |r| */
LANE_ISA static float rotate(const float* x, const float* cosc, const float* sinc, int64_t pos, int64_t D, float* r) {
  int64_t half = D / 2, i = 0;
  const float *c = cosc + pos * half, *s = sinc + pos * half;
  __m512 top = _mm512_setzero_ps();
  for (; i + 16 <= half; i += 16) {
    __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + half);
    __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
    __m512 ra = _mm512_fmsub_ps(a, cv, _mm512_mul_ps(b, sv)), rb = _mm512_fmadd_ps(b, cv, _mm512_mul_ps(a, sv));
    _mm512_storeu_ps(r + i, ra);
    _mm512_storeu_ps(r + i + half, rb);
    top = _mm512_max_ps(top, _mm512_max_ps(_mm512_abs_ps(ra), _mm512_abs_ps(rb)));
  }
  float peak = _mm512_reduce_max_ps(top);
  for (; i < half; i++) {
    r[i] = x[i] * c[i] - x[i + half] * s[i];
    r[i + half] = x[i + half] * c[i] + x[i] * s[i];
    peak = fmaxf(peak, fmaxf(fabsf(r[i]), fabsf(r[i + half])));
  }
  return peak;
}

/* row [D] (D a multiple of 16) to round(row / scale) in int8, scale = max |row| / 127; returns the scale */
LANE_ISA static float to_int8(const float* row, float peak, int64_t D, int8_t* q) {
  float scale = peak > 0.f ? peak / 127.f : 1.f;
  __m512 inv = _mm512_set1_ps(1.f / scale);
  for (int64_t d = 0; d < D; d += 16)
    _mm_storeu_si128((__m128i*)(q + d), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + d), inv))));
  return scale;
}

/* token t's head row x [D] as the graph had it before attention: times the row scale, then RMSNorm and gamma;
 * x itself where neither applies, else the row made in buf */
LANE_ISA static const float* projected(const Call* c, const float* x, int64_t t, const float* gamma, float* buf) {
  int64_t D = c->D;
  if (c->row_scale == NULL && gamma == NULL) return x;
  __m512 by = _mm512_set1_ps(c->row_scale ? c->row_scale[t] : 1.f), squares = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 16) {
    __m512 v = _mm512_loadu_ps(x + d);
    if (c->row_scale) v = _mm512_mul_ps(v, by);
    squares = _mm512_fmadd_ps(v, v, squares);
    _mm512_storeu_ps(buf + d, v);
  }
  if (gamma == NULL) return buf;
  __m512 inv = _mm512_set1_ps(1.f / sqrtf(_mm512_reduce_add_ps(squares) / (float)D + c->epsilon));
  for (int64_t d = 0; d < D; d += 16)
    _mm512_storeu_ps(buf + d, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(buf + d), inv), _mm512_loadu_ps(gamma + d)));
  return buf;
}

static inline int64_t valid_keys(const Call* c, int64_t b) {
  int64_t n = (int64_t)c->seqlens[b] + 1;
  return n < 0 ? 0 : (n > c->S ? c->S : n);
}

/* One (batch, kv head): K rotated, smoothed, int8 a token and packed for vpdpbusd; V to bf16 pairs. */
LANE_ISA static void pack_kv(void* data, size_t task) {
  const Call* c = data;
  int64_t b = (int64_t)task / c->Hk, g = (int64_t)task % c->Hk, D = c->D, S = c->S, Sp = c->Sp, G = D / 4;
  int64_t n = valid_keys(c, b), ld = c->kv_ld;
  const float *k = c->k + b * S * ld + g * D, *v = c->v + b * S * ld + g * D;
  size_t slot = (size_t)(b * c->Hk + g);
  int8_t* kq = c->kq + slot * Sp * D;
  float* ks = c->kscale + slot * Sp;
  int32_t* ksum = c->ksum + slot * Sp;
  uint32_t* vb = (uint32_t*)(c->vb + slot * Sp * D);
  float* rot = malloc(sizeof(float) * (size_t)((n + 1) * D));
  float *mean = rot + n * D;
  int8_t q[D];
  float row[D];
  memset(mean, 0, sizeof(float) * (size_t)D);
  for (int64_t j = 0; j < n; j++) {
    rotate(projected(c, k + j * ld, b * S + j, c->k_gamma, row), c->cosc, c->sinc, j, D, rot + j * D);
    for (int64_t d = 0; d < D; d += 16)
      _mm512_storeu_ps(mean + d, _mm512_add_ps(_mm512_loadu_ps(mean + d), _mm512_loadu_ps(rot + j * D + d)));
  }
  for (int64_t d = 0; d < D; d++) mean[d] = n ? mean[d] / (float)n : 0.f;
  memset(kq, 0, (size_t)(Sp * D));
  memset(ks, 0, sizeof(float) * (size_t)Sp); /* keys past n score nothing */
  memset(ksum, 0, sizeof(int32_t) * (size_t)Sp);
  for (int64_t j = 0; j < n; j++) {
    float* row = rot + j * D;
    __m512 top = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      __m512 x = _mm512_sub_ps(_mm512_loadu_ps(row + d), _mm512_loadu_ps(mean + d));
      _mm512_storeu_ps(row + d, x);
      top = _mm512_max_ps(top, _mm512_abs_ps(x));
    }
    ks[j] = to_int8(row, _mm512_reduce_max_ps(top), D, q);
    int32_t sum = 0;
    for (int64_t q4 = 0; q4 < G; q4++) {
      memcpy(kq + ((j / 16) * G + q4) * 64 + (j % 16) * 4, q + q4 * 4, 4);
      sum += q[q4 * 4] + q[q4 * 4 + 1] + q[q4 * 4 + 2] + q[q4 * 4 + 3];
    }
    ksum[j] = sum;
  }
  for (int64_t j = 0; j < Sp; j += 2) { /* a pair of keys' values, interleaved: (j, j+1) in each 32-bit word */
    __m512 lo_by = _mm512_set1_ps(c->row_scale && j < n ? c->row_scale[b * S + j] : 1.f);
    __m512 hi_by = _mm512_set1_ps(c->row_scale && j + 1 < n ? c->row_scale[b * S + j + 1] : 1.f);
    for (int64_t d = 0; d < D; d += 16) {
      __m512 lo = j < n ? _mm512_mul_ps(_mm512_loadu_ps(v + j * ld + d), lo_by) : _mm512_setzero_ps();
      __m512 hi = j + 1 < n ? _mm512_mul_ps(_mm512_loadu_ps(v + (j + 1) * ld + d), hi_by) : _mm512_setzero_ps();
      __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
      __m512i bh = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi)), 16);
      _mm512_storeu_si512(vb + (j / 2) * D + d, _mm512_or_si512(a, bh));
    }
  }
  free(rot);
}

/* Rows [r0, r0+nr) of query head h of batch b: scores in int8, softmax, P·V in bf16. */
LANE_ISA static void block(const Call* c, int64_t b, int64_t h, int64_t r0, int64_t nr, float* sc, uint16_t* pb,
                      uint8_t* qu, float* qrot) {
  int64_t D = c->D, S = c->S, Sp = c->Sp, G = D / 4, g = h / (c->H / c->Hk), n = valid_keys(c, b);
  size_t slot = (size_t)(b * c->Hk + g);
  const int8_t* kq = c->kq + slot * Sp * D;
  const float* ks = c->kscale + slot * Sp;
  const int32_t* ksum = c->ksum + slot * Sp;
  const uint16_t* vb = c->vb + slot * Sp * D;
  float qs[ROWS], row[D];
  for (int64_t r = 0; r < ROWS; r++) { /* rows past nr repeat the first: computed, never stored */
    int64_t i = r0 + (r < nr ? r : 0);
    const float* x = projected(c, c->q + (b * S + i) * c->q_ld + h * D, b * S + i, c->q_gamma, row);
    float peak = rotate(x, c->cosc, c->sinc, i, D, qrot);
    int8_t* row = (int8_t*)(qu + r * D);
    qs[r] = to_int8(qrot, peak, D, row) * c->scale;
    for (int64_t d = 0; d < D; d += 16) /* u8 for vpdpbusd: +128, taken back with the keys' sums */
      _mm_storeu_si128((__m128i*)(row + d), _mm_xor_si128(_mm_loadu_si128((const __m128i*)(row + d)), _mm_set1_epi8((char)0x80)));
  }
  int64_t blocks = (n + KEYS - 1) / KEYS;
  for (int64_t kb = 0; kb < blocks; kb++) {
    __m512i acc[ROWS][4];
    for (int r = 0; r < ROWS; r++)
      for (int t = 0; t < 4; t++) acc[r][t] = _mm512_setzero_si512();
    const int8_t* base = kq + kb * 4 * G * 64;
    for (int64_t q4 = 0; q4 < G; q4++) {
      __m512i k0 = _mm512_loadu_si512(base + q4 * 64), k1 = _mm512_loadu_si512(base + (G + q4) * 64),
              k2 = _mm512_loadu_si512(base + (2 * G + q4) * 64), k3 = _mm512_loadu_si512(base + (3 * G + q4) * 64);
      for (int r = 0; r < ROWS; r++) {
        __m512i a = _mm512_set1_epi32(((const int32_t*)(qu + r * D))[q4]);
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, k0);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, k1);
        acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], a, k2);
        acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], a, k3);
      }
    }
    for (int t = 0; t < 4; t++) { /* the +128 on each query byte, taken back: 128 x the key's sum */
      int64_t j = kb * KEYS + t * 16;
      __m512i back = _mm512_slli_epi32(_mm512_loadu_si512(ksum + j), 7);
      __m512 kscale = _mm512_loadu_ps(ks + j);
      for (int r = 0; r < ROWS; r++) {
        __m512 s = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][t], back));
        _mm512_storeu_ps(sc + r * Sp + j, _mm512_mul_ps(s, _mm512_mul_ps(kscale, _mm512_set1_ps(qs[r]))));
      }
    }
  }
  float inv_sum[ROWS];
  for (int64_t r = 0; r < ROWS; r++) {
    float* row = sc + r * Sp;
    uint16_t* prow = pb + r * Sp;
    if (r >= nr) { /* a padding row of the block: weights of zero */
      memset(prow, 0, sizeof(uint16_t) * (size_t)Sp);
      inv_sum[r] = 0.f;
      continue;
    }
    const float* bias = c->bias + ((c->bias_batch > 1 ? b : 0) * S + r0 + r) * S;
    __m512 top = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
      __mmask16 in = j + 16 <= n ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
      __m512 x = _mm512_add_ps(_mm512_loadu_ps(row + j), _mm512_maskz_loadu_ps(in, bias + j));
      _mm512_storeu_ps(row + j, x);
      top = _mm512_mask_max_ps(top, in, top, x);
    }
    __m512 peak = _mm512_set1_ps(_mm512_reduce_max_ps(top)), sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < Sp; j += 16) {
      __mmask16 in = j >= n ? 0 : j + 16 <= n ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
      __m512 p = _mm512_maskz_mov_ps(in, exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + j), peak)));
      sum = _mm512_add_ps(sum, p);
      _mm256_storeu_si256((__m256i*)(prow + j), (__m256i)_mm512_cvtneps_pbh(p));
    }
    float total = _mm512_reduce_add_ps(sum);
    inv_sum[r] = total > 0.f ? 1.f / total : 0.f;
  }
  int64_t pairs = (n + 1) / 2;
  for (int64_t d0 = 0; d0 < D; d0 += 64) {
    int64_t cols = D - d0 < 64 ? (D - d0) / 16 : 4;
    __m512 acc[ROWS][4];
    for (int r = 0; r < ROWS; r++)
      for (int t = 0; t < 4; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t jp = 0; jp < pairs; jp++) {
      const uint16_t* vrow = vb + jp * D * 2 + d0 * 2;
      __m512bh v[4];
      for (int t = 0; t < cols; t++) v[t] = (__m512bh)_mm512_loadu_si512(vrow + t * 32);
      for (int r = 0; r < ROWS; r++) {
        __m512bh p = (__m512bh)_mm512_set1_epi32(((const int32_t*)(pb + r * Sp))[jp]);
        for (int t = 0; t < cols; t++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], p, v[t]);
      }
    }
    for (int64_t r = 0; r < nr; r++) {
      float* o = c->out + (b * S + r0 + r) * c->H * D + h * D + d0;
      for (int t = 0; t < cols; t++) _mm512_storeu_ps(o + t * 16, _mm512_mul_ps(acc[r][t], _mm512_set1_ps(inv_sum[r])));
    }
  }
}

static void rows_task(void* data, size_t task) {
  const Call* c = data;
  int64_t per_head = (c->S + TASK_ROWS - 1) / TASK_ROWS;
  int64_t bh = (int64_t)task / per_head, r0 = ((int64_t)task % per_head) * TASK_ROWS;
  int64_t b = bh / c->H, h = bh % c->H, end = r0 + TASK_ROWS < c->S ? r0 + TASK_ROWS : c->S;
  float* sc = aligned_alloc(64, sizeof(float) * (size_t)(ROWS * c->Sp));
  uint16_t* pb = aligned_alloc(64, sizeof(uint16_t) * (size_t)(ROWS * c->Sp + 64));
  uint8_t* qu = aligned_alloc(64, (size_t)(ROWS * c->D));
  float* qrot = malloc(sizeof(float) * (size_t)c->D);
  for (int64_t i = r0; i < end; i += ROWS) block(c, b, h, i, end - i < ROWS ? end - i : ROWS, sc, pb, qu, qrot);
  free(qrot);
  free(qu);
  free(pb);
  free(sc);
}

/* an optional input [D] (a norm's weights) that is absent or fits */
static int fits_vector(const float* data, const int64_t* dims, size_t rank, int64_t D) {
  return data == NULL || (rank == 1 && dims[0] == D);
}

static void compute(void* self, OrtKernelContext* ctx) {
  const Kernel* kernel = self;
  int64_t qd[MAX_RANK], kd[MAX_RANK], vd[MAX_RANK], bd[MAX_RANK], cd[MAX_RANK], rd[MAX_RANK], gq[MAX_RANK],
      gk[MAX_RANK], skip[MAX_RANK];
  size_t qr, kr, vr, br, cr, rr, gqr, gkr, sr;
  Call c = {0};
  c.q = op_input(ctx, 0, qd, &qr);
  c.k = op_input(ctx, 1, kd, &kr);
  c.v = op_input(ctx, 2, vd, &vr);
  c.seqlens = op_input(ctx, 3, skip, &sr);
  c.cosc = op_input(ctx, 4, cd, &cr);
  c.sinc = op_input(ctx, 5, skip, &sr);
  c.bias = op_input(ctx, 6, bd, &br);
  c.row_scale = op_input(ctx, 7, rd, &rr);
  c.q_gamma = op_input(ctx, 8, gq, &gqr);
  c.k_gamma = op_input(ctx, 9, gk, &gkr);
  c.H = kernel->heads;
  c.Hk = kernel->kv_heads;
  c.epsilon = kernel->epsilon;
  int packed = c.k == NULL && c.v == NULL;
  /* What fused_attention.py's rewrite guarantees, checked: this interface returns no error, so a misfit gets
   * an output of NaN, which the step cannot miss, instead of a read past an input. */
  int64_t width = packed ? c.H + 2 * c.Hk : c.H; /* heads in a token's query row */
  int fits = qr == 3 && cr == 2 && br == 4 && c.H > 0 && c.Hk > 0 && c.H % c.Hk == 0 && qd[2] % width == 0 &&
             (packed || (kr == 3 && vr == 3));
  if (fits) {
    c.B = qd[0];
    c.S = qd[1];
    c.D = qd[2] / width;
    c.q_ld = qd[2];
    c.kv_ld = packed ? qd[2] : c.Hk * c.D;
    if (packed) {
      c.k = c.q + c.H * c.D;
      c.v = c.k + c.Hk * c.D;
    }
    fits = c.D % 16 == 0 && cd[0] >= c.S && cd[1] == c.D / 2 && (bd[0] == c.B || bd[0] == 1) && bd[2] == c.S &&
           bd[3] == c.S && (packed || (kd[0] == c.B && kd[1] == c.S && kd[2] == c.kv_ld && vd[0] == c.B &&
                                       vd[1] == c.S && vd[2] == c.kv_ld)) &&
           (c.row_scale == NULL || (rr == 3 && rd[0] == c.B && rd[1] == c.S && rd[2] == 1)) &&
           fits_vector(c.q_gamma, gq, gqr, c.D) && fits_vector(c.k_gamma, gk, gkr, c.D);
  }
  int64_t out_dims[3] = {qr == 3 ? qd[0] : 0, qr == 3 ? qd[1] : 0, fits ? c.H * c.D : qr == 3 ? qd[2] : 0};
  float* out = op_output(ctx, 0, out_dims, 3);
  if (!fits) {
    for (int64_t i = 0; i < out_dims[0] * out_dims[1] * out_dims[2]; i++) out[i] = NAN;
    return;
  }
  c.out = out;
  c.bias_batch = bd[0];
  c.scale = kernel->scale != 0.f ? kernel->scale : 1.f / sqrtf((float)c.D); /* 0: GroupQueryAttention's default */
  c.Sp = (c.S + KEYS - 1) / KEYS * KEYS;
  if (c.B == 0 || c.S == 0) return;
  size_t slots = (size_t)(c.B * c.Hk);
  c.kq = aligned_alloc(64, slots * (size_t)(c.Sp * c.D));
  c.kscale = malloc(sizeof(float) * slots * (size_t)c.Sp);
  c.ksum = malloc(sizeof(int32_t) * slots * (size_t)c.Sp);
  c.vb = aligned_alloc(64, sizeof(uint16_t) * slots * (size_t)(c.Sp * c.D));
  op_parallel(ctx, pack_kv, slots, &c);
  op_parallel(ctx, rows_task, (size_t)(c.B * c.H * ((c.S + TASK_ROWS - 1) / TASK_ROWS)), &c);
  free(c.vb);
  free(c.ksum);
  free(c.kscale);
  free(c.kq);
}

static void* create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  (void)op;
  (void)api;
  Kernel* k = calloc(1, sizeof(Kernel));
  k->heads = op_int_attribute(info, "num_heads", 0);
  k->kv_heads = op_int_attribute(info, "kv_num_heads", 0);
  k->scale = op_float_attribute(info, "scale", 0.f);
  k->epsilon = op_float_attribute(info, "epsilon", 1e-6f);
  return k;
}

static const int inputs[] = {FLOAT, FLOAT, FLOAT, INT32, FLOAT, FLOAT, FLOAT, FLOAT, FLOAT, FLOAT}, outputs[] = {FLOAT};
static const int kinds[] = {REQUIRED, OPTIONAL, OPTIONAL, REQUIRED, REQUIRED, REQUIRED, REQUIRED, OPTIONAL, OPTIONAL, OPTIONAL};
Op attention_op = {.base = {.CreateKernel = create_kernel, .KernelCompute = compute, .KernelDestroy = free},
                   .name = "BidirectionalAttention", .inputs = 10, .outputs = 1,
                   .input_types = inputs, .output_types = outputs, .input_kinds = kinds};
