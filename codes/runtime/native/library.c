/* The library's entry point and what its ops share: ONNX Runtime's tensors read and written, the session's
 * threads, the ai.omnivoice domain registered once a process.
 *
 * The ops (codes/runtime/contract/native_kernels.py swaps them into a quantized backbone at load):
 *   BidirectionalAttention (attention.c): the backbone's attention, Q·Kᵀ in int8, P·V in bf16;
 *   QuantizeRows, SkipNormQuantizeRows, GatedQuantizeRows (quantize_rows.c): the per-token int8 activations
 *   with the norm, the residual sum or the gated SiLU they follow, in one pass over each row;
 *   Snake (snake.c): the codec's activation, in one pass.
 * They need AVX-512 with VNNI and BF16; on other CPUs registration fails and the runtime keeps ONNX Runtime's
 * own ops. */
#include <pthread.h>
#include <stdlib.h>

#include "kernels.h"

const OrtApi* ort;

typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtTensorTypeAndShapeInfo OrtShape;
typedef struct OrtApiBase {
  const OrtApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)(void);
} OrtApiBase;

typedef OrtStatus* (*GetInputFn)(const OrtKernelContext*, size_t, const OrtValue**);
typedef OrtStatus* (*GetOutputFn)(OrtKernelContext*, size_t, const int64_t*, size_t, OrtValue**);
typedef OrtStatus* (*DataFn)(const OrtValue*, void**);
typedef OrtStatus* (*ShapeFn)(const OrtValue*, OrtShape**);
typedef OrtStatus* (*DimCountFn)(const OrtShape*, size_t*);
typedef OrtStatus* (*DimsFn)(const OrtShape*, int64_t*, size_t);
typedef void (*ReleaseShapeFn)(OrtShape*);
typedef OrtStatus* (*ParallelForFn)(const OrtKernelContext*, void (*)(void*, size_t), size_t, size_t, void*);
typedef OrtStatus* (*AttrIntFn)(const OrtKernelInfo*, const char*, int64_t*);
typedef OrtStatus* (*AttrFloatFn)(const OrtKernelInfo*, const char*, float*);
typedef OrtStatus* (*StatusFn)(int, const char*);
typedef OrtStatus* (*DomainFn)(const char*, OrtCustomOpDomain**);
typedef OrtStatus* (*DomainAddFn)(OrtCustomOpDomain*, const OrtCustomOp*);
typedef OrtStatus* (*AddDomainFn)(OrtSessionOptions*, OrtCustomOpDomain*);
enum { ORT_FAIL = 1 };

const void* op_input(OrtKernelContext* ctx, size_t i, int64_t* dims, size_t* rank) {
  const OrtValue* value = NULL;
  void* data = NULL;
  OrtShape* shape = NULL;
  *rank = 0;
  FN(KernelContext_GetInput, GetInputFn)(ctx, i, &value);
  if (value == NULL) return NULL; /* an optional input, absent */
  FN(GetTensorMutableData, DataFn)(value, &data);
  FN(GetTensorTypeAndShape, ShapeFn)(value, &shape);
  FN(GetDimensionsCount, DimCountFn)(shape, rank);
  if (*rank <= MAX_RANK) FN(GetDimensions, DimsFn)(shape, dims, *rank);
  FN(ReleaseTensorTypeAndShapeInfo, ReleaseShapeFn)(shape);
  return data;
}

void* op_output(OrtKernelContext* ctx, size_t i, const int64_t* dims, size_t rank) {
  OrtValue* value = NULL;
  void* data = NULL;
  FN(KernelContext_GetOutput, GetOutputFn)(ctx, i, dims, rank, &value);
  FN(GetTensorMutableData, DataFn)(value, &data);
  return data;
}

void op_parallel(OrtKernelContext* ctx, void (*task)(void*, size_t), size_t tasks, void* data) {
  FN(KernelContext_ParallelFor, ParallelForFn)(ctx, task, tasks, tasks, data);
}

float op_float_attribute(const OrtKernelInfo* info, const char* name, float fallback) {
  float value = fallback;
  OrtStatus* missing = FN(KernelInfoGetAttribute_float, AttrFloatFn)(info, name, &value);
  return missing == NULL ? value : fallback; /* a missing attribute's status is leaked: once per session */
}

int64_t op_int_attribute(const OrtKernelInfo* info, const char* name, int64_t fallback) {
  int64_t value = fallback;
  OrtStatus* missing = FN(KernelInfoGetAttribute_int64, AttrIntFn)(info, name, &value);
  return missing == NULL ? value : fallback;
}

static const char* op_name(const OrtCustomOp* op) { return ((const Op*)op)->name; }
static const char* op_provider(const OrtCustomOp* op) { (void)op; return "CPUExecutionProvider"; }
static int input_type(const OrtCustomOp* op, size_t i) { return ((const Op*)op)->input_types[i]; }
static size_t input_count(const OrtCustomOp* op) { return ((const Op*)op)->inputs; }
static int output_type(const OrtCustomOp* op, size_t i) { return ((const Op*)op)->output_types[i]; }
static size_t output_count(const OrtCustomOp* op) { return ((const Op*)op)->outputs; }
static int input_kind(const OrtCustomOp* op, size_t i) {
  const Op* self = (const Op*)op;
  return self->input_kinds ? self->input_kinds[i] : REQUIRED;
}
static int required(const OrtCustomOp* op, size_t i) { (void)op; (void)i; return REQUIRED; }
static int default_memory(const OrtCustomOp* op, size_t i) { (void)op; (void)i; return 0; }

/* The callbacks every op answers from its Op (CreateKernel, KernelCompute and KernelDestroy are its own). */
void op_init(Op* op) {
  op->base.version = 13;
  op->base.GetName = op_name;
  op->base.GetExecutionProviderType = op_provider;
  op->base.GetInputType = input_type;
  op->base.GetInputTypeCount = input_count;
  op->base.GetOutputType = output_type;
  op->base.GetOutputTypeCount = output_count;
  op->base.GetInputCharacteristic = input_kind;
  op->base.GetOutputCharacteristic = required;
  op->base.GetMemoryType = default_memory;
}

/* The ISA the library's kernels need, asked of the CPU itself. */
int omnivoice_kernels_run_here(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16");
}

static Op* const ops[] = {&attention_op, &quantize_rows_op, &skip_norm_quantize_rows_op, &gated_quantize_rows_op,
                          &snake_op};
static OrtCustomOpDomain* domain; /* made once, lives as long as the process: sessions keep pointing at it */
static OrtStatus* domain_status;

static void make_domain(void) {
  domain_status = FN(CreateCustomOpDomain, DomainFn)("ai.omnivoice", &domain);
  for (size_t i = 0; domain_status == NULL && i < sizeof ops / sizeof ops[0]; i++) {
    op_init(ops[i]);
    domain_status = FN(CustomOpDomain_Add, DomainAddFn)(domain, &ops[i]->base);
  }
}

__attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                      const OrtApiBase* base) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  ort = base->GetApi(API_VERSION);
  if (ort == NULL) return NULL; /* nothing to report with: an ONNX Runtime older than 1.18 */
  if (!omnivoice_kernels_run_here())
    return FN(CreateStatus, StatusFn)(ORT_FAIL, "the ai.omnivoice kernels need AVX-512 VNNI and BF16");
  pthread_once(&once, make_domain); /* sessions of one process may load at once */
  if (domain_status != NULL) return FN(CreateStatus, StatusFn)(ORT_FAIL, "the ai.omnivoice domain was not made");
  return FN(AddCustomOpDomain, AddDomainFn)(options, domain);
}
