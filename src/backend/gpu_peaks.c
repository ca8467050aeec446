#include "backend/gpu_peaks.h"

#include <stddef.h>
#include <string.h>

/* The first row whose name the description contains gives the peak, so a
 * variant (H100 PCIe) comes before its family (H100). Figures: NVIDIA's data
 * sheets, dense bf16 with fp32 accumulation (half the "with sparsity" ones). */
static const struct {
    const char *name;
    double tflops;
} PEAKS[] = {
    {"H100 PCIe", 756},  /* 114 SMs at a lower clock than the SXM part */
    {"H100 NVL", 835},
    {"H200 NVL", 835},
    {"H100", 989},       /* SXM */
    {"H200", 989},       /* SXM; GH200 too: the same GPU */
    {"GB200", 2500},
    {"B200", 2250},
    {"A100", 312},
    {"L40S", 362},
};

double df_gpu_nominal_bf16_tflops(const char *description) {
    if (!description) return 0;
    for (size_t i = 0; i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (strstr(description, PEAKS[i].name)) return PEAKS[i].tflops;
    return 0;
}
