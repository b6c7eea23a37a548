/* The kernels that run at either vector width, at 16 lanes (AVX-512). */
#define LANES 16
#include "kernels.h"
#include "lanes.h"
#include "quantize_rows_tasks.h"
#include "snake_tasks.h"

const Tasks TIERED(tasks) = {.quantize = TIERED(quantize_task), .skip_norm = TIERED(skip_norm_task),
                             .gated = TIERED(gated_task), .snake = TIERED(snake_task)};
