/* The per-token int8 activations of a quantized backbone, each in one pass over its rows.
 *
 * The build quantizes each linear layer's input by row: scale = max(max|x|, floor) / 127, then
 * round(x / scale) + 128 in uint8 for MLAS's u8 x s8 GEMM (codes/export/int8.py). As ONNX ops that is eight
 * nodes and four passes over x, and the GEMM's output is then multiplied by the row scale in a pass of its
 * own. Here each op reads its inputs once (a row stays in cache between its passes) and writes the uint8 row:
 *   QuantizeRows(x) -> q, scale
 *   SkipNormQuantizeRows(residual, skip, skip_scale?, gamma) -> q, scale, sum: sum = residual + skip x
 *     skip_scale (the row scale of the GEMM that made skip), quantized after RMSNorm (epsilon) and gamma;
 *   GatedQuantizeRows(gate, up, scale?) -> q, scale: SiLU(gate x scale) x (up x scale), quantized.
 * The optional scales take the Muls that followed the GEMMs: the row's values are the same products.
 * Attributes: floor (the row scale's least peak), epsilon. Shapes [..., K], scales [..., 1], gamma [K].
 * An input these kernels cannot take gives empty outputs, which the GEMM after them refuses: never a read past
 * an input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define TASK_ROWS 16 /* rows a task takes */
#define INV127 (1.f / 127.f) /* what the build's graph multiplies the peak by, in fp32 */

typedef struct {
  float floor, epsilon;
} Kernel;

typedef struct {
  const float *x, *y, *row_scale, *gamma; /* x: the input, residual or gate; y: skip or up */
  uint8_t* q;
  float *scale, *sum;
  int64_t rows, K;
  float floor, epsilon;
} Call;

/* round(x / scale) + 128 in uint8, for 16 lanes */
ISA static inline __m128i to_uint8(__m512 x, __m512 scale) {
  __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_div_ps(x, scale)), _mm512_set1_epi32(128));
  return _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512()));
}

ISA static inline float row_scale(__m512 peak, float floor) {
  return fmaxf(_mm512_reduce_max_ps(peak), floor) * INV127;
}

ISA static void quantize_task(void* data, size_t task) {
  const Call* c = data;
  int64_t K = c->K, end = ((int64_t)task + 1) * TASK_ROWS < c->rows ? ((int64_t)task + 1) * TASK_ROWS : c->rows;
  for (int64_t i = (int64_t)task * TASK_ROWS; i < end; i++) {
    const float* x = c->x + i * K;
    __m512 peak = _mm512_setzero_ps();
    for (int64_t j = 0; j < K; j += 16)
      peak = _mm512_max_ps(peak, _mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(K - j), x + j)));
    float scale = row_scale(peak, c->floor);
    __m512 s = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < K; j += 16)
      _mm_mask_storeu_epi8(c->q + i * K + j, first_lanes(K - j), to_uint8(_mm512_maskz_loadu_ps(first_lanes(K - j), x + j), s));
    c->scale[i] = scale;
  }
}

ISA static void skip_norm_task(void* data, size_t task) {
  const Call* c = data;
  int64_t K = c->K, end = ((int64_t)task + 1) * TASK_ROWS < c->rows ? ((int64_t)task + 1) * TASK_ROWS : c->rows;
  for (int64_t i = (int64_t)task * TASK_ROWS; i < end; i++) {
    const float *res = c->x + i * K, *skip = c->y + i * K;
    float* sum = c->sum + i * K;
    __m512 by = _mm512_set1_ps(c->row_scale ? c->row_scale[i] : 1.f), squares = _mm512_setzero_ps();
    for (int64_t j = 0; j < K; j += 16) {
      __mmask16 in = first_lanes(K - j);
      __m512 b = _mm512_maskz_loadu_ps(in, skip + j);
      if (c->row_scale) b = _mm512_mul_ps(b, by); /* the GEMM's Mul, as it was */
      __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(in, res + j), b);
      _mm512_mask_storeu_ps(sum + j, in, v);
      squares = _mm512_fmadd_ps(v, v, squares);
    }
    __m512 inv = _mm512_set1_ps(1.f / sqrtf(_mm512_reduce_add_ps(squares) / (float)K + c->epsilon));
    __m512 peak = _mm512_setzero_ps();
    for (int64_t j = 0; j < K; j += 16) {
      __mmask16 in = first_lanes(K - j);
      __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(in, sum + j), inv), _mm512_maskz_loadu_ps(in, c->gamma + j));
      peak = _mm512_max_ps(peak, _mm512_abs_ps(y));
    }
    float scale = row_scale(peak, c->floor);
    __m512 s = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < K; j += 16) {
      __mmask16 in = first_lanes(K - j);
      __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(in, sum + j), inv), _mm512_maskz_loadu_ps(in, c->gamma + j));
      _mm_mask_storeu_epi8(c->q + i * K + j, in, to_uint8(y, s));
    }
    c->scale[i] = scale;
  }
}

/* SiLU(g x by) x (u x by) for 16 lanes: sigmoid from e^-|g|, which never overflows */
ISA static inline __m512 gated(__m512 g, __m512 u, __m512 by, int scaled) {
  if (scaled) {
    g = _mm512_mul_ps(g, by);
    u = _mm512_mul_ps(u, by);
  }
  __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
  __m512 one = _mm512_set1_ps(1.f), denominator = _mm512_add_ps(one, e);
  __mmask16 negative = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512 sigmoid = _mm512_div_ps(_mm512_mask_blend_ps(negative, one, e), denominator);
  return _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), u);
}

ISA static void gated_task(void* data, size_t task) {
  const Call* c = data;
  int64_t K = c->K, end = ((int64_t)task + 1) * TASK_ROWS < c->rows ? ((int64_t)task + 1) * TASK_ROWS : c->rows;
  int scaled = c->row_scale != NULL;
  float* x = aligned_alloc(64, sizeof(float) * (size_t)((K + 15) / 16 * 16)); /* a row, kept in cache */
  for (int64_t i = (int64_t)task * TASK_ROWS; i < end; i++) {
    const float *g = c->x + i * K, *u = c->y + i * K;
    __m512 by = _mm512_set1_ps(scaled ? c->row_scale[i] : 1.f), peak = _mm512_setzero_ps();
    for (int64_t j = 0; j < K; j += 16) {
      __mmask16 in = first_lanes(K - j);
      __m512 v = gated(_mm512_maskz_loadu_ps(in, g + j), _mm512_maskz_loadu_ps(in, u + j), by, scaled);
      _mm512_store_ps(x + j, v);
      peak = _mm512_max_ps(peak, _mm512_abs_ps(v));
    }
    float scale = row_scale(peak, c->floor);
    __m512 s = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < K; j += 16)
      _mm_mask_storeu_epi8(c->q + i * K + j, first_lanes(K - j), to_uint8(_mm512_load_ps(x + j), s));
    c->scale[i] = scale;
  }
  free(x);
}

static int same(const int64_t* a, size_t ra, const int64_t* b, size_t rb) {
  if (ra != rb) return 0;
  for (size_t i = 0; i < ra; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

/* rows of x [..., K] and its row scale's shape [..., 1] */
static int64_t rows_of(const int64_t* dims, size_t rank, int64_t* scale_dims) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < rank; i++) rows *= dims[i], scale_dims[i] = dims[i];
  scale_dims[rank - 1] = 1;
  return rows;
}

/* Outputs made, tasks run: q [dims], scale [..., 1], and for a skip the sum [dims]. A misfit: empty ones. */
static void run(OrtKernelContext* ctx, Call* c, const int64_t* dims, size_t rank, int fits, int with_sum,
                void (*task)(void*, size_t)) {
  int64_t scale_dims[MAX_RANK], none[1] = {0};
  fits = fits && rank >= 1 && rank <= MAX_RANK;
  if (!fits) dims = none, rank = 1;
  c->rows = rows_of(dims, rank, scale_dims);
  c->K = dims[rank - 1];
  c->q = op_output(ctx, 0, dims, rank);
  c->scale = op_output(ctx, 1, scale_dims, rank);
  if (with_sum) c->sum = op_output(ctx, 2, dims, rank);
  if (!fits || c->rows == 0 || c->K == 0) return;
  op_parallel(ctx, task, (size_t)((c->rows + TASK_ROWS - 1) / TASK_ROWS), c);
}

static void quantize_compute(void* self, OrtKernelContext* ctx) {
  const Kernel* k = self;
  int64_t dims[MAX_RANK];
  size_t rank;
  Call c = {.floor = k->floor};
  c.x = op_input(ctx, 0, dims, &rank);
  run(ctx, &c, dims, rank, 1, 0, quantize_task);
}

/* a row scale [..., 1] that fits rows of dims */
static int fits_row_scale(const int64_t* dims, size_t rank, const int64_t* sd, size_t sr) {
  if (sr != rank || rank < 1 || rank > MAX_RANK || sd[rank - 1] != 1) return 0;
  for (size_t i = 0; i + 1 < rank; i++)
    if (sd[i] != dims[i]) return 0;
  return 1;
}

static void skip_norm_compute(void* self, OrtKernelContext* ctx) {
  const Kernel* k = self;
  int64_t dims[MAX_RANK], skip_dims[MAX_RANK], scale_dims[MAX_RANK], gamma_dims[MAX_RANK];
  size_t rank, skip_rank, scale_rank, gamma_rank;
  Call c = {.floor = k->floor, .epsilon = k->epsilon};
  c.x = op_input(ctx, 0, dims, &rank);
  c.y = op_input(ctx, 1, skip_dims, &skip_rank);
  c.row_scale = op_input(ctx, 2, scale_dims, &scale_rank);
  c.gamma = op_input(ctx, 3, gamma_dims, &gamma_rank);
  int fits = rank >= 1 && rank <= MAX_RANK && same(dims, rank, skip_dims, skip_rank) && gamma_rank == 1 &&
             gamma_dims[0] == dims[rank - 1] && (c.row_scale == NULL || fits_row_scale(dims, rank, scale_dims, scale_rank));
  run(ctx, &c, dims, rank, fits, 1, skip_norm_task);
}

static void gated_compute(void* self, OrtKernelContext* ctx) {
  const Kernel* k = self;
  int64_t dims[MAX_RANK], up_dims[MAX_RANK], scale_dims[MAX_RANK];
  size_t rank, up_rank, scale_rank;
  Call c = {.floor = k->floor};
  c.x = op_input(ctx, 0, dims, &rank);
  c.y = op_input(ctx, 1, up_dims, &up_rank);
  c.row_scale = op_input(ctx, 2, scale_dims, &scale_rank);
  int fits = rank >= 1 && rank <= MAX_RANK && same(dims, rank, up_dims, up_rank) &&
             (c.row_scale == NULL || fits_row_scale(dims, rank, scale_dims, scale_rank));
  run(ctx, &c, dims, rank, fits, 0, gated_task);
}

static void* create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  (void)op;
  (void)api;
  Kernel* k = calloc(1, sizeof(Kernel));
  k->floor = op_float_attribute(info, "floor", 0.f);
  k->epsilon = op_float_attribute(info, "epsilon", 1e-6f);
  return k;
}

static const int one_float[] = {FLOAT}, skip_inputs[] = {FLOAT, FLOAT, FLOAT, FLOAT}, gated_inputs[] = {FLOAT, FLOAT, FLOAT};
static const int skip_kinds[] = {REQUIRED, REQUIRED, OPTIONAL, REQUIRED}, gated_kinds[] = {REQUIRED, REQUIRED, OPTIONAL};
static const int q_scale[] = {UINT8, FLOAT}, q_scale_sum[] = {UINT8, FLOAT, FLOAT};

#define OP(compute_fn) {.CreateKernel = create_kernel, .KernelCompute = compute_fn, .KernelDestroy = free}
Op quantize_rows_op = {.base = OP(quantize_compute), .name = "QuantizeRows", .inputs = 1, .outputs = 2,
                       .input_types = one_float, .output_types = q_scale};
Op skip_norm_quantize_rows_op = {.base = OP(skip_norm_compute), .name = "SkipNormQuantizeRows", .inputs = 4,
                                 .outputs = 3, .input_types = skip_inputs, .output_types = q_scale_sum,
                                 .input_kinds = skip_kinds};
Op gated_quantize_rows_op = {.base = OP(gated_compute), .name = "GatedQuantizeRows", .inputs = 3, .outputs = 2,
                             .input_types = gated_inputs, .output_types = q_scale, .input_kinds = gated_kinds};
