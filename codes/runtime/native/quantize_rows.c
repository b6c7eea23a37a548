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
 * an input. Their loops, at either vector width, are in quantize_rows_tasks.h. */
#include <stdlib.h>

#include "kernels.h"

typedef struct {
  float floor, epsilon;
  const Tasks* tasks;
} Kernel;

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
static void run(OrtKernelContext* ctx, RowsCall* c, const int64_t* dims, size_t rank, int fits, int with_sum,
                Task task) {
  int64_t scale_dims[MAX_RANK], none[1] = {0};
  fits = fits && rank >= 1 && rank <= MAX_RANK;
  if (!fits) dims = none, rank = 1;
  c->rows = rows_of(dims, rank, scale_dims);
  c->K = dims[rank - 1];
  c->q = op_output(ctx, 0, dims, rank);
  c->scale = op_output(ctx, 1, scale_dims, rank);
  if (with_sum) c->sum = op_output(ctx, 2, dims, rank);
  if (!fits || c->rows == 0 || c->K == 0) return;
  op_parallel(ctx, task, (size_t)((c->rows + ROWS_A_TASK - 1) / ROWS_A_TASK), c);
}

static void quantize_compute(void* self, OrtKernelContext* ctx) {
  const Kernel* k = self;
  int64_t dims[MAX_RANK];
  size_t rank;
  RowsCall c = {.floor = k->floor};
  c.x = op_input(ctx, 0, dims, &rank);
  run(ctx, &c, dims, rank, 1, 0, k->tasks->quantize);
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
  RowsCall c = {.floor = k->floor, .epsilon = k->epsilon};
  c.x = op_input(ctx, 0, dims, &rank);
  c.y = op_input(ctx, 1, skip_dims, &skip_rank);
  c.row_scale = op_input(ctx, 2, scale_dims, &scale_rank);
  c.gamma = op_input(ctx, 3, gamma_dims, &gamma_rank);
  int fits = rank >= 1 && rank <= MAX_RANK && same(dims, rank, skip_dims, skip_rank) && gamma_rank == 1 &&
             gamma_dims[0] == dims[rank - 1] && (c.row_scale == NULL || fits_row_scale(dims, rank, scale_dims, scale_rank));
  run(ctx, &c, dims, rank, fits, 1, k->tasks->skip_norm);
}

static void gated_compute(void* self, OrtKernelContext* ctx) {
  const Kernel* k = self;
  int64_t dims[MAX_RANK], up_dims[MAX_RANK], scale_dims[MAX_RANK];
  size_t rank, up_rank, scale_rank;
  RowsCall c = {.floor = k->floor};
  c.x = op_input(ctx, 0, dims, &rank);
  c.y = op_input(ctx, 1, up_dims, &up_rank);
  c.row_scale = op_input(ctx, 2, scale_dims, &scale_rank);
  int fits = rank >= 1 && rank <= MAX_RANK && same(dims, rank, up_dims, up_rank) &&
             (c.row_scale == NULL || fits_row_scale(dims, rank, scale_dims, scale_rank));
  run(ctx, &c, dims, rank, fits, 0, k->tasks->gated);
}

static void* create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  (void)api;
  Kernel* k = calloc(1, sizeof(Kernel));
  k->tasks = ((const Op*)op)->tasks;
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
