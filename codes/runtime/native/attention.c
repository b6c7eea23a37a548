/* Bidirectional grouped-query attention for ONNX Runtime's CPU provider, at the integer rate.
 *
 * The op ai.omnivoice::BidirectionalAttention stands where the genai backbone's GroupQueryAttention stood
 * (codes/runtime/contract/fused_attention.py rewrites the graph at load) and computes what it computes for a
 * first prompt: rotary positions 0..S-1 (half-split, not interleaved), keys past seqlens_k[b] masked, the
 * additive bias, softmax, P·V. Inputs: query [B,S,H*D], key and value [B,S,Hk*D], seqlens_k int32 [B],
 * cos_cache and sin_cache [P,D/2], attention_bias [B or 1,1,S,S]. Output [B,S,H*D].
 *
 * Q·Kᵀ runs in int8 (vpdpbusd): K smoothed by its mean over the valid keys (every score of a row moves by the
 * same amount, which softmax ignores), then each query and key row scaled to +-127. P·V runs in bf16
 * (vdpbf16ps) with fp32 sums. One pass per block of query rows: scores, softmax and P·V stay in cache.
 * Needs AVX-512 with VNNI and BF16; on other CPUs registration fails and the runtime keeps GroupQueryAttention.
 *
 * ONNX Runtime's C API is declared here by hand: the few entries this library calls, at their places in
 * OrtApi (the table only ever grows at its end), and the version-13 layout of OrtCustomOp. */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct OrtStatus OrtStatus;
typedef struct OrtValue OrtValue;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtTensorTypeAndShapeInfo OrtShape;
typedef struct OrtApi OrtApi;
typedef struct OrtApiBase {
  const OrtApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)(void);
} OrtApiBase;

/* OrtApi entries by their index in the table */
enum {
  API_CreateStatus = 0, API_CreateCustomOpDomain = 26, API_CustomOpDomain_Add = 27, API_AddCustomOpDomain = 28,
  API_GetTensorMutableData = 51, API_GetDimensionsCount = 61, API_GetDimensions = 62,
  API_GetTensorTypeAndShape = 65, API_KernelInfoGetAttribute_float = 85, API_KernelInfoGetAttribute_int64 = 86,
  API_KernelContext_GetInput = 90, API_KernelContext_GetOutput = 91, API_ReleaseTensorTypeAndShapeInfo = 99,
  API_KernelContext_ParallelFor = 274,
};
#define API_VERSION 18 /* the first whose table holds KernelContext_ParallelFor */
#define FN(name, type) ((type)((void* const*)ort)[API_##name])

enum { ORT_FAIL = 1 };
enum { FLOAT = 1, INT32 = 6 };

typedef struct OrtCustomOp {
  uint32_t version;
  void* (*CreateKernel)(const struct OrtCustomOp*, const OrtApi*, const OrtKernelInfo*);
  const char* (*GetName)(const struct OrtCustomOp*);
  const char* (*GetExecutionProviderType)(const struct OrtCustomOp*);
  int (*GetInputType)(const struct OrtCustomOp*, size_t);
  size_t (*GetInputTypeCount)(const struct OrtCustomOp*);
  int (*GetOutputType)(const struct OrtCustomOp*, size_t);
  size_t (*GetOutputTypeCount)(const struct OrtCustomOp*);
  void (*KernelCompute)(void*, OrtKernelContext*);
  void (*KernelDestroy)(void*);
  int (*GetInputCharacteristic)(const struct OrtCustomOp*, size_t);
  int (*GetOutputCharacteristic)(const struct OrtCustomOp*, size_t);
  int (*GetMemoryType)(const struct OrtCustomOp*, size_t);
} OrtCustomOp;

static const OrtApi* ort;

#define ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")))
#define ROWS 4      /* query rows a register block holds */
#define TASK_ROWS 32 /* query rows a task takes */
#define KEYS 64     /* keys a score block holds (Sp is a multiple) */

typedef struct {
  int64_t heads, kv_heads;
  float scale;
} Kernel;

typedef struct {
  const float *q, *k, *v, *cosc, *sinc, *bias;
  const int32_t* seqlens;
  float* out;
  int64_t B, S, H, Hk, D, Sp, bias_batch;
  float scale;
  int8_t* kq;      /* [B][Hk][Sp/16][D/4][16][4] */
  float* kscale;   /* [B][Hk][Sp] */
  int32_t* ksum;   /* [B][Hk][Sp] */
  uint16_t* vb;    /* [B][Hk][Sp/2][D][2] bf16 */
} Call;

/* x [D] at position pos, rotated half-split into r; returns max |r| */
ISA static float rotate(const float* x, const float* cosc, const float* sinc, int64_t pos, int64_t D, float* r) {
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
ISA static float to_int8(const float* row, float peak, int64_t D, int8_t* q) {
  float scale = peak > 0.f ? peak / 127.f : 1.f;
  __m512 inv = _mm512_set1_ps(1.f / scale);
  for (int64_t d = 0; d < D; d += 16)
    _mm_storeu_si128((__m128i*)(q + d), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + d), inv))));
  return scale;
}

static inline int64_t valid_keys(const Call* c, int64_t b) {
  int64_t n = (int64_t)c->seqlens[b] + 1;
  return n < 0 ? 0 : (n > c->S ? c->S : n);
}

/* One (batch, kv head): K rotated, smoothed, int8 a token and packed for vpdpbusd; V to bf16 pairs. */
ISA static void pack_kv(void* data, size_t task) {
  const Call* c = data;
  int64_t b = (int64_t)task / c->Hk, g = (int64_t)task % c->Hk, D = c->D, S = c->S, Sp = c->Sp, G = D / 4;
  int64_t n = valid_keys(c, b), ld = c->Hk * D;
  const float *k = c->k + b * S * ld + g * D, *v = c->v + b * S * ld + g * D;
  size_t slot = (size_t)(b * c->Hk + g);
  int8_t* kq = c->kq + slot * Sp * D;
  float* ks = c->kscale + slot * Sp;
  int32_t* ksum = c->ksum + slot * Sp;
  uint32_t* vb = (uint32_t*)(c->vb + slot * Sp * D);
  float* rot = malloc(sizeof(float) * (size_t)((n + 1) * D));
  float *mean = rot + n * D;
  int8_t q[D];
  memset(mean, 0, sizeof(float) * (size_t)D);
  for (int64_t j = 0; j < n; j++) {
    rotate(k + j * ld, c->cosc, c->sinc, j, D, rot + j * D);
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
  for (int64_t j = 0; j < Sp; j += 2) /* a pair of keys' values, interleaved: (j, j+1) in each 32-bit word */
    for (int64_t d = 0; d < D; d += 16) {
      __m512 lo = j < n ? _mm512_loadu_ps(v + j * ld + d) : _mm512_setzero_ps();
      __m512 hi = j + 1 < n ? _mm512_loadu_ps(v + (j + 1) * ld + d) : _mm512_setzero_ps();
      __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
      __m512i bh = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi)), 16);
      _mm512_storeu_si512(vb + (j / 2) * D + d, _mm512_or_si512(a, bh));
    }
  free(rot);
}

/* e^x for x <= 0 (a score less the row's peak): 2^n 2^f, f in [-1/2, 1/2], 2^f by a degree-6 polynomial
 * (4e-9 relative in exact arithmetic: fp32's own rounding is what remains). */
ISA static inline __m512 exp_nonpositive(__m512 x) {
  __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)), _mm512_set1_ps(1.44269504088896341f));
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.5353362e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3398874e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6184374e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5503325e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022648e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314720e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

/* Rows [r0, r0+nr) of query head h of batch b: scores in int8, softmax, P·V in bf16. */
ISA static void block(const Call* c, int64_t b, int64_t h, int64_t r0, int64_t nr, float* sc, uint16_t* pb,
                      uint8_t* qu, float* qrot) {
  int64_t D = c->D, S = c->S, Sp = c->Sp, G = D / 4, g = h / (c->H / c->Hk), n = valid_keys(c, b);
  size_t slot = (size_t)(b * c->Hk + g);
  const int8_t* kq = c->kq + slot * Sp * D;
  const float* ks = c->kscale + slot * Sp;
  const int32_t* ksum = c->ksum + slot * Sp;
  const uint16_t* vb = c->vb + slot * Sp * D;
  float qs[ROWS];
  for (int64_t r = 0; r < ROWS; r++) { /* rows past nr repeat the first: computed, never stored */
    int64_t i = r0 + (r < nr ? r : 0);
    float peak = rotate(c->q + (b * S + i) * c->H * D + h * D, c->cosc, c->sinc, i, D, qrot);
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

typedef OrtStatus* (*GetInputFn)(const OrtKernelContext*, size_t, const OrtValue**);
typedef OrtStatus* (*GetOutputFn)(OrtKernelContext*, size_t, const int64_t*, size_t, OrtValue**);
typedef OrtStatus* (*DataFn)(const OrtValue*, void**);
typedef OrtStatus* (*ShapeFn)(const OrtValue*, OrtShape**);
typedef OrtStatus* (*DimCountFn)(const OrtShape*, size_t*);
typedef OrtStatus* (*DimsFn)(const OrtShape*, int64_t*, size_t);
typedef void (*ReleaseShapeFn)(OrtShape*);
typedef OrtStatus* (*ParallelForFn)(const OrtKernelContext*, void (*)(void*, size_t), size_t, size_t, void*);

static const void* input(OrtKernelContext* ctx, size_t i, int64_t* dims, size_t* rank) {
  const OrtValue* value = NULL;
  void* data = NULL;
  OrtShape* shape = NULL;
  FN(KernelContext_GetInput, GetInputFn)(ctx, i, &value);
  FN(GetTensorMutableData, DataFn)(value, &data);
  FN(GetTensorTypeAndShape, ShapeFn)(value, &shape);
  FN(GetDimensionsCount, DimCountFn)(shape, rank);
  if (*rank <= 4) FN(GetDimensions, DimsFn)(shape, dims, *rank);
  FN(ReleaseTensorTypeAndShapeInfo, ReleaseShapeFn)(shape);
  return data;
}

static void compute(void* self, OrtKernelContext* ctx) {
  const Kernel* kernel = self;
  int64_t qd[4], kd[4], bd[4], cd[4], skip[4];
  size_t qr, kr, br, cr, sr;
  Call c = {0};
  c.q = input(ctx, 0, qd, &qr);
  c.k = input(ctx, 1, kd, &kr);
  c.v = input(ctx, 2, skip, &sr);
  c.seqlens = input(ctx, 3, skip, &sr);
  c.cosc = input(ctx, 4, cd, &cr);
  c.sinc = input(ctx, 5, skip, &sr);
  c.bias = input(ctx, 6, bd, &br);
  c.H = kernel->heads;
  c.Hk = kernel->kv_heads;
  /* What fused_attention.py's rewrite guarantees, checked: this interface returns no error, so a misfit gets
   * an output of NaN, which the step cannot miss, instead of a read past an input. */
  int fits = qr == 3 && kr == 3 && cr == 2 && br == 4 && c.H > 0 && c.Hk > 0 && c.H % c.Hk == 0 && qd[2] % c.H == 0;
  if (fits) {
    c.B = qd[0];
    c.S = qd[1];
    c.D = qd[2] / c.H;
    fits = c.D % 16 == 0 && kd[0] == c.B && kd[1] == c.S && kd[2] == c.Hk * c.D && cd[0] >= c.S &&
           cd[1] == c.D / 2 && (bd[0] == c.B || bd[0] == 1) && bd[2] == c.S && bd[3] == c.S;
  }
  int64_t none[1] = {0};
  OrtValue* out_value = NULL;
  void* out = NULL;
  FN(KernelContext_GetOutput, GetOutputFn)(ctx, 0, qr <= 4 ? qd : none, qr <= 4 ? qr : 1, &out_value);
  FN(GetTensorMutableData, DataFn)(out_value, &out);
  if (!fits) {
    int64_t count = 1;
    for (size_t i = 0; qr <= 4 && i < qr; i++) count *= qd[i];
    for (int64_t i = 0; qr <= 4 && i < count; i++) ((float*)out)[i] = NAN;
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
  ParallelForFn parallel_for = FN(KernelContext_ParallelFor, ParallelForFn);
  parallel_for(ctx, pack_kv, slots, slots, &c);
  size_t tasks = (size_t)(c.B * c.H * ((c.S + TASK_ROWS - 1) / TASK_ROWS));
  parallel_for(ctx, rows_task, tasks, tasks, &c);
  free(c.vb);
  free(c.ksum);
  free(c.kscale);
  free(c.kq);
}

typedef OrtStatus* (*AttrIntFn)(const OrtKernelInfo*, const char*, int64_t*);
typedef OrtStatus* (*AttrFloatFn)(const OrtKernelInfo*, const char*, float*);

static void* create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  (void)op;
  (void)api;
  Kernel* k = calloc(1, sizeof(Kernel));
  FN(KernelInfoGetAttribute_int64, AttrIntFn)(info, "num_heads", &k->heads);
  FN(KernelInfoGetAttribute_int64, AttrIntFn)(info, "kv_num_heads", &k->kv_heads);
  FN(KernelInfoGetAttribute_float, AttrFloatFn)(info, "scale", &k->scale);
  return k;
}

static const char* op_name(const OrtCustomOp* op) { (void)op; return "BidirectionalAttention"; }
static const char* op_provider(const OrtCustomOp* op) { (void)op; return "CPUExecutionProvider"; }
static int input_type(const OrtCustomOp* op, size_t i) { (void)op; return i == 3 ? INT32 : FLOAT; }
static size_t input_count(const OrtCustomOp* op) { (void)op; return 7; }
static int output_type(const OrtCustomOp* op, size_t i) { (void)op; (void)i; return FLOAT; }
static size_t output_count(const OrtCustomOp* op) { (void)op; return 1; }
static int required(const OrtCustomOp* op, size_t i) { (void)op; (void)i; return 0; }
static int default_memory(const OrtCustomOp* op, size_t i) { (void)op; (void)i; return 0; }

static OrtCustomOp op = {
    13, create_kernel, op_name, op_provider, input_type, input_count, output_type, output_count,
    compute, free, required, required, default_memory,
};

typedef OrtStatus* (*StatusFn)(int, const char*);
typedef OrtStatus* (*DomainFn)(const char*, OrtCustomOpDomain**);
typedef OrtStatus* (*DomainAddFn)(OrtCustomOpDomain*, const OrtCustomOp*);
typedef OrtStatus* (*AddDomainFn)(OrtSessionOptions*, OrtCustomOpDomain*);

/* The ISA this library's kernel needs, asked of the CPU itself. */
int omnivoice_attention_runs_here(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16");
}

static OrtCustomOpDomain* domain; /* made once, lives as long as the process: sessions keep pointing at it */
static OrtStatus* domain_status;

static void make_domain(void) {
  domain_status = FN(CreateCustomOpDomain, DomainFn)("ai.omnivoice", &domain);
  if (domain_status == NULL) domain_status = FN(CustomOpDomain_Add, DomainAddFn)(domain, &op);
}

__attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                      const OrtApiBase* base) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  ort = base->GetApi(API_VERSION);
  if (ort == NULL) return NULL; /* nothing to report with: an ONNX Runtime older than 1.18 */
  if (!omnivoice_attention_runs_here())
    return FN(CreateStatus, StatusFn)(ORT_FAIL, "BidirectionalAttention needs AVX-512 VNNI and BF16");
  pthread_once(&once, make_domain); /* sessions of one process may load at once */
  if (domain_status != NULL) return FN(CreateStatus, StatusFn)(ORT_FAIL, "the ai.omnivoice domain was not made");
  return FN(AddCustomOpDomain, AddDomainFn)(options, domain);
}
