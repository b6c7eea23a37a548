/* The library's entry point and what its ops share: ONNX Runtime's tensors read and written, the session's
 * threads, the ai.omnivoice domain registered once a process.
 *
 * The ops (codes/runtime/contract/native_kernels.py swaps them into a quantized backbone at load):
 *   BidirectionalAttention (attention.c): the backbone's attention, Q·Kᵀ in int8, P·V in bf16;
 *   QuantizeRows, SkipNormQuantizeRows, GatedQuantizeRows (quantize_rows.c): the per-token int8 activations
 *   with the norm, the residual sum or the gated SiLU they follow, in one pass over each row;
 *   Snake (snake.c): the codec's activation, in one pass.
 * The attention needs AVX-512 with VNNI and BF16. The others run at 16 lanes there and at 8 on AVX2 with FMA
 * (tier16.c, tier8.c), where the domain holds them without the attention; OMNIVOICE_ONNX_KERNELS=avx2 asks for
 * that domain on any CPU (to compare the two, or to test the AVX2 loops). Below AVX2 registration fails and the
 * runtime keeps ONNX Runtime's own ops. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

/* The widest lanes this CPU runs the library's kernels at, asked of the CPU itself: 16 where the attention
 * runs too, 8 where only the others do, 0 where none. */
static int lanes_here(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16"))
    return 16;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 8 : 0;
}

/* The ops of each width's domain: the attention only at 16 lanes */
static Op* const ops_16[] = {&attention_op, &quantize_rows_op, &skip_norm_quantize_rows_op, &gated_quantize_rows_op,
                             &snake_op};
static Op* const ops_8[] = {&quantize_rows_op, &skip_norm_quantize_rows_op, &gated_quantize_rows_op, &snake_op};
enum { MAX_OPS = sizeof ops_16 / sizeof ops_16[0] };

typedef struct {
  const Tasks* tasks;
  Op* const* prototypes;
  size_t count;
  Op ops[MAX_OPS]; /* the prototypes' copies, each running its loops at this width */
  OrtCustomOpDomain* domain; /* made once, lives as long as the process: sessions keep pointing at it */
  OrtStatus* status;
  pthread_once_t once;
} Domain;

static Domain domains[] = {
    {.tasks = &tasks_16, .prototypes = ops_16, .count = sizeof ops_16 / sizeof ops_16[0], .once = PTHREAD_ONCE_INIT},
    {.tasks = &tasks_8, .prototypes = ops_8, .count = sizeof ops_8 / sizeof ops_8[0], .once = PTHREAD_ONCE_INIT},
};

static void make_domain(Domain* d) {
  d->status = FN(CreateCustomOpDomain, DomainFn)("ai.omnivoice", &d->domain);
  for (size_t i = 0; d->status == NULL && i < d->count; i++) {
    d->ops[i] = *d->prototypes[i];
    d->ops[i].tasks = d->tasks;
    op_init(&d->ops[i]);
    d->status = FN(CustomOpDomain_Add, DomainAddFn)(d->domain, &d->ops[i].base);
  }
}
static void make_domain_16(void) { make_domain(&domains[0]); }
static void make_domain_8(void) { make_domain(&domains[1]); }

__attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                      const OrtApiBase* base) {
  ort = base->GetApi(API_VERSION);
  if (ort == NULL) return NULL; /* nothing to report with: an ONNX Runtime older than 1.18 */
  int lanes = lanes_here();
  const char* asked = getenv("OMNIVOICE_ONNX_KERNELS"); /* native_kernels.py's SWITCH */
  if (asked != NULL && strcmp(asked, "avx2") == 0 && lanes > 8) lanes = 8;
  if (lanes == 0) return FN(CreateStatus, StatusFn)(ORT_FAIL, "the ai.omnivoice kernels need AVX2 and FMA");
  Domain* d = lanes == 16 ? &domains[0] : &domains[1];
  pthread_once(&d->once, lanes == 16 ? make_domain_16 : make_domain_8); /* sessions of one process may load at once */
  if (d->status != NULL) return FN(CreateStatus, StatusFn)(ORT_FAIL, "the ai.omnivoice domain was not made");
  return FN(AddCustomOpDomain, AddDomainFn)(options, d->domain);
}
