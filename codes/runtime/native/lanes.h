/* Vectors of floats at one width, for kernels written once and compiled at each (tier16.c, tier8.c).
 *
 * Define LANES before including: 16 is AVX-512 (the CPUs the attention kernel runs on), 8 is AVX2 with FMA
 * (every x86-64 CPU since Haswell and Zen 1). Each operation rounds as its instruction does at either width,
 * so a kernel's per-lane results are the same at both; only sums across lanes are ordered by the width.
 * `first n` below means the first min(n, LANES) lanes. */
#ifndef LANES
#error "define LANES (16 or 8) before including lanes.h"
#endif

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TIERED_(name, lanes) name##_##lanes
#define TIERED_AT(name, lanes) TIERED_(name, lanes)
#define TIERED(name) TIERED_AT(name, LANES) /* this width's copy of a kernel: quantize_task_16 */

#if LANES == 16
#define LANE_ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")))
typedef __m512 vf;
typedef __mmask16 vmask;

static inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }
LANE_ISA static inline vf vload(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
LANE_ISA static inline void vstore(float* p, int64_t n, vf v) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
LANE_ISA static inline vf vset(float x) { return _mm512_set1_ps(x); }
LANE_ISA static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
LANE_ISA static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
LANE_ISA static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
LANE_ISA static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
LANE_ISA static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }   /* a·b + c */
LANE_ISA static inline vf vfnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); } /* c − a·b */
LANE_ISA static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
LANE_ISA static inline vf vabs(vf a) { return _mm512_abs_ps(a); }
LANE_ISA static inline float vmax_all(vf a) { return _mm512_reduce_max_ps(a); }
LANE_ISA static inline float vsum_all(vf a) { return _mm512_reduce_add_ps(a); }
LANE_ISA static inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
LANE_ISA static inline vmask vnegative(vf a) { return _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ); }
/* lanes whose a (a whole number) is odd */
LANE_ISA static inline vmask vodd(vf a) { return _mm512_test_epi32_mask(_mm512_cvtps_epi32(a), _mm512_set1_epi32(1)); }
LANE_ISA static inline vf vselect(vmask m, vf otherwise, vf where) { return _mm512_mask_blend_ps(m, otherwise, where); }
/* p·2^n, n whole */
LANE_ISA static inline vf vscale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }
/* the first n lanes of round(x / scale) + 128, clamped to uint8, stored at q */
LANE_ISA static inline void vstore_uint8(uint8_t* q, int64_t n, vf x, vf scale) {
  __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_div_ps(x, scale)), _mm512_set1_epi32(128));
  _mm_mask_storeu_epi8(q, first_lanes(n), _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512())));
}

#elif LANES == 8
#define LANE_ISA __attribute__((target("avx2,fma")))
typedef __m256 vf;
typedef __m256 vmask; /* all ones in a lane that is in */

LANE_ISA static inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n >= 8 ? 8 : (int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
LANE_ISA static inline vf vload(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_lanes(n));
}
LANE_ISA static inline void vstore(float* p, int64_t n, vf v) {
  if (n >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, first_lanes(n), v);
}
LANE_ISA static inline vf vset(float x) { return _mm256_set1_ps(x); }
LANE_ISA static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
LANE_ISA static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
LANE_ISA static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
LANE_ISA static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
LANE_ISA static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
LANE_ISA static inline vf vfnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
LANE_ISA static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
LANE_ISA static inline vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
LANE_ISA static inline float vmax_all(vf a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
LANE_ISA static inline float vsum_all(vf a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
LANE_ISA static inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
LANE_ISA static inline vmask vnegative(vf a) { return _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_LT_OQ); }
LANE_ISA static inline vmask vodd(vf a) {
  __m256i one = _mm256_set1_epi32(1);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_cvtps_epi32(a), one), one));
}
LANE_ISA static inline vf vselect(vmask m, vf otherwise, vf where) { return _mm256_blendv_ps(otherwise, where, m); }
/* p·2^n for n in [-126, 127], which is all the callers give: 2^n made from its exponent bits */
LANE_ISA static inline vf vscale2(vf p, vf n) {
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
LANE_ISA static inline void vstore_uint8(uint8_t* q, int64_t n, vf x, vf scale) {
  __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_div_ps(x, scale)), _mm256_set1_epi32(128));
  v = _mm256_min_epi32(_mm256_max_epi32(v, _mm256_setzero_si256()), _mm256_set1_epi32(255));
  __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  __m128i bytes = _mm_packus_epi16(words, words);
  if (n >= 8) _mm_storel_epi64((__m128i*)q, bytes);
  else {
    uint8_t row[16];
    _mm_storeu_si128((__m128i*)row, bytes);
    memcpy(q, row, (size_t)n);
  }
}

#else
#error "LANES is 16 or 8"
#endif

LANE_ISA static inline vf vzero(void) { return vset(0.f); }

/* e^x for x <= 0: 2^n 2^f, f in [-1/2, 1/2], 2^f by a degree-6 polynomial (4e-9 relative in exact
 * arithmetic: fp32's own rounding is what remains). */
LANE_ISA static inline vf exp_nonpositive(vf x) {
  vf t = vmul(vmax(x, vset(-87.f)), vset(1.44269504088896341f));
  vf n = vround(t), f = vsub(t, n);
  vf p = vset(1.5353362e-4f);
  p = vfma(p, f, vset(1.3398874e-3f));
  p = vfma(p, f, vset(9.6184374e-3f));
  p = vfma(p, f, vset(5.5503325e-2f));
  p = vfma(p, f, vset(2.4022648e-1f));
  p = vfma(p, f, vset(6.9314720e-1f));
  p = vfma(p, f, vset(1.f));
  return vscale2(p, n);
}
