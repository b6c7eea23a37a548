/* What the library's kernels share: ONNX Runtime's C API, declared by hand, and the vector helpers.
 *
 * ONNX Runtime's C header is in no package the registries serve. Declared here: the few OrtApi entries the
 * library calls, at their places in the table (it only ever grows at its end), and the version-13 layout
 * of OrtCustomOp. */
#ifndef OMNIVOICE_KERNELS_H
#define OMNIVOICE_KERNELS_H

#include <immintrin.h>
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

/* An op of the library: ONNX Runtime sees `base`; the rest is what the shared callbacks answer from. */
typedef struct {
  OrtCustomOp base;
  const char* name;
  size_t inputs, outputs;
  const int *input_types, *output_types, *input_kinds;
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

#define ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")))

/* e^x for x <= 0: 2^n 2^f, f in [-1/2, 1/2], 2^f by a degree-6 polynomial (4e-9 relative in exact
 * arithmetic: fp32's own rounding is what remains). */
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

/* The lanes of a row's last partial vector: the first n of 16. */
static inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

#endif
