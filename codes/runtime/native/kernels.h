/* What the library's kernels share: ONNX Runtime's C API, declared by hand, and the vector helpers.
 *
 * ONNX Runtime's C header is in no package the registries serve. Declared here: the few OrtApi entries the
 * library calls, at their places in the table (it only ever grows at its end), and the version-13 layout
 * of OrtCustomOp. */
#ifndef OMNIVOICE_KERNELS_H
#define OMNIVOICE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct OrtStatus OrtStatus;
typedef struct OrtValue OrtValue;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtApi OrtApi;

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
extern const OrtApi* ort;

enum { FLOAT = 1, UINT8 = 2, INT32 = 6 };       /* ONNX element types */
enum { REQUIRED = 0, OPTIONAL = 1 };             /* an input's characteristic */

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

typedef struct Tasks Tasks;

/* An op of the library: ONNX Runtime sees `base`; the rest is what the shared callbacks answer from. */
typedef struct {
  OrtCustomOp base;
  const char* name;
  size_t inputs, outputs;
  const int *input_types, *output_types, *input_kinds;
  const Tasks* tasks; /* the width its loops run at, where it has loops of either (library.c sets it) */
} Op;

#define MAX_RANK 4
/* An input's data and shape (rank > MAX_RANK: dims unread), or NULL with rank 0 where an optional input
 * is absent. */
const void* op_input(OrtKernelContext* ctx, size_t i, int64_t* dims, size_t* rank);
void* op_output(OrtKernelContext* ctx, size_t i, const int64_t* dims, size_t rank);
void op_parallel(OrtKernelContext* ctx, void (*task)(void*, size_t), size_t tasks, void* data);
float op_float_attribute(const OrtKernelInfo* info, const char* name, float fallback);
int64_t op_int_attribute(const OrtKernelInfo* info, const char* name, int64_t fallback);
void op_init(Op* op);

extern Op attention_op;
extern Op quantize_rows_op, skip_norm_quantize_rows_op, gated_quantize_rows_op, snake_op;

/* What a row kernel is handed (quantize_rows.c; its loops in quantize_rows_tasks.h), ROWS_A_TASK rows a task */
#define ROWS_A_TASK 16
typedef struct {
  const float *x, *y, *row_scale, *gamma; /* x: the input, residual or gate; y: skip or up */
  uint8_t* q;
  float *scale, *sum;
  int64_t rows, K;
  float floor, epsilon;
} RowsCall;

/* What Snake's kernel is handed (snake.c; its loop in snake_tasks.h), SNAKE_CHUNK samples of a row a task */
#define SNAKE_CHUNK 4096
typedef struct {
  const float *x, *alpha, *inverse;
  float* y;
  int64_t C, L, chunks;
} SnakeCall;

/* The loops of the ops that run at either vector width, one table a width (tier16.c, tier8.c): each task
 * takes a call and its index among op_parallel's tasks. */
typedef void (*Task)(void*, size_t);
struct Tasks {
  Task quantize, skip_norm, gated, snake;
};
extern const Tasks tasks_16, tasks_8;

#endif
