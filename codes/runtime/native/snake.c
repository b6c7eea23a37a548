/* The codec's Snake activation in one pass: y = x + inverse * sin(alpha * x)^2, per channel.
 *
 * The Higgs decoder (and its acoustic encoder) writes each Snake as five ONNX ops over the whole signal, Sin and
 * Pow among them on one thread: an fp32 decoder takes 1.35 s for 10 s on the Zen 4, 0.87 s with this op.
 * Snake(x [B,C,L], alpha [1,C,1], inverse [1,C,1]) -> y [B,C,L] reads x once, on the session's threads, with a
 * sine of its own (about 1e-7 relative; its loop, at either vector width, in snake_tasks.h). An input this
 * kernel cannot take gives an output of NaN. */
#include <math.h>
#include <stdlib.h>

#include "kernels.h"

static int per_channel(const int64_t* dims, size_t rank, int64_t C) {
  return rank == 3 && dims[0] == 1 && dims[1] == C && dims[2] == 1;
}

static void compute(void* self, OrtKernelContext* ctx) {
  const Tasks* tasks = *(const Tasks* const*)self;
  int64_t xd[MAX_RANK], ad[MAX_RANK], id[MAX_RANK];
  size_t xr, ar, ir;
  SnakeCall c = {0};
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
  c.chunks = (c.L + SNAKE_CHUNK - 1) / SNAKE_CHUNK;
  if (xd[0] * c.C * c.L == 0) return;
  op_parallel(ctx, tasks->snake, (size_t)(xd[0] * c.C * c.chunks), &c);
}

static void* create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  (void)api;
  (void)info;
  const Tasks** kernel = malloc(sizeof *kernel); /* the width its loop runs at */
  *kernel = ((const Op*)op)->tasks;
  return kernel;
}

static const int inputs[] = {FLOAT, FLOAT, FLOAT}, outputs[] = {FLOAT};
Op snake_op = {.base = {.CreateKernel = create_kernel, .KernelCompute = compute, .KernelDestroy = free},
               .name = "Snake", .inputs = 3, .outputs = 1, .input_types = inputs, .output_types = outputs};
