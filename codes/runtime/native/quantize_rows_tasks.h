/* The row kernels' loops (quantize_rows.c has the ops around them), in lanes.h's vectors: included once for each
 * width by tier16.c and tier8.c. A task takes ROWS_A_TASK rows of a RowsCall. */
#include <math.h>
#include <stdlib.h>

#define INV127 (1.f / 127.f) /* what the build's graph multiplies the peak by, in fp32 */

static inline int64_t task_end(const RowsCall* c, size_t task) {
  int64_t end = ((int64_t)task + 1) * ROWS_A_TASK;
  return end < c->rows ? end : c->rows;
}

LANE_ISA static inline float row_scale(vf peak, float floor) { return fmaxf(vmax_all(peak), floor) * INV127; }

LANE_ISA static void TIERED(quantize_task)(void* data, size_t task) {
  const RowsCall* c = data;
  int64_t K = c->K;
  for (int64_t i = (int64_t)task * ROWS_A_TASK; i < task_end(c, task); i++) {
    const float* x = c->x + i * K;
    vf peak = vzero();
    for (int64_t j = 0; j < K; j += LANES) peak = vmax(peak, vabs(vload(x + j, K - j)));
    float scale = row_scale(peak, c->floor);
    vf s = vset(scale);
    for (int64_t j = 0; j < K; j += LANES) vstore_uint8(c->q + i * K + j, K - j, vload(x + j, K - j), s);
    c->scale[i] = scale;
  }
}

LANE_ISA static void TIERED(skip_norm_task)(void* data, size_t task) {
  const RowsCall* c = data;
  int64_t K = c->K;
  for (int64_t i = (int64_t)task * ROWS_A_TASK; i < task_end(c, task); i++) {
    const float *res = c->x + i * K, *skip = c->y + i * K;
    float* sum = c->sum + i * K;
    vf by = vset(c->row_scale ? c->row_scale[i] : 1.f), squares = vzero();
    for (int64_t j = 0; j < K; j += LANES) {
      vf b = vload(skip + j, K - j);
      if (c->row_scale) b = vmul(b, by); /* the GEMM's Mul, as it was */
      vf v = vadd(vload(res + j, K - j), b);
      vstore(sum + j, K - j, v);
      squares = vfma(v, v, squares);
    }
    vf inv = vset(1.f / sqrtf(vsum_all(squares) / (float)K + c->epsilon)), peak = vzero();
    for (int64_t j = 0; j < K; j += LANES)
      peak = vmax(peak, vabs(vmul(vmul(vload(sum + j, K - j), inv), vload(c->gamma + j, K - j))));
    float scale = row_scale(peak, c->floor);
    vf s = vset(scale);
    for (int64_t j = 0; j < K; j += LANES)
      vstore_uint8(c->q + i * K + j, K - j, vmul(vmul(vload(sum + j, K - j), inv), vload(c->gamma + j, K - j)), s);
    c->scale[i] = scale;
  }
}

/* SiLU(g·by)·(u·by): the sigmoid from e^-|g|, which never overflows */
LANE_ISA static inline vf gated(vf g, vf u, vf by, int scaled) {
  if (scaled) {
    g = vmul(g, by);
    u = vmul(u, by);
  }
  vf e = exp_nonpositive(vsub(vzero(), vabs(g)));
  vf one = vset(1.f), sigmoid = vdiv(vselect(vnegative(g), one, e), vadd(one, e));
  return vmul(vmul(g, sigmoid), u);
}

LANE_ISA static void TIERED(gated_task)(void* data, size_t task) {
  const RowsCall* c = data;
  int64_t K = c->K, padded = (K + 15) / 16 * 16; /* whole vectors, and whole 64-byte lines as aligned_alloc asks */
  int scaled = c->row_scale != NULL;
  float* x = aligned_alloc(64, sizeof(float) * (size_t)padded); /* a row, kept in cache */
  for (int64_t i = (int64_t)task * ROWS_A_TASK; i < task_end(c, task); i++) {
    const float *g = c->x + i * K, *u = c->y + i * K;
    vf by = vset(scaled ? c->row_scale[i] : 1.f), peak = vzero();
    for (int64_t j = 0; j < K; j += LANES) {
      vf v = gated(vload(g + j, K - j), vload(u + j, K - j), by, scaled);
      vstore(x + j, LANES, v);
      peak = vmax(peak, vabs(v)); /* lanes past K are SiLU(0)·0 = 0 */
    }
    float scale = row_scale(peak, c->floor);
    vf s = vset(scale);
    for (int64_t j = 0; j < K; j += LANES) vstore_uint8(c->q + i * K + j, K - j, vload(x + j, LANES), s);
    c->scale[i] = scale;
  }
  free(x);
}
