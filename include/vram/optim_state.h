/* vram — the layout of 8-bit optimizer state, one definition for the graph (which sizes it), the plan
 * (which counts it) and the kernels (which read and write it).
 *
 * Block-wise dynamic quantization (Dettmers et al. 2021, "8-bit Optimizers via Block-wise Quantization",
 * as bitsandbytes does it today): a parameter tensor's state (Adam's m and v, or SGD's momentum) is
 * stored as one u8 code per element, an index into a 256-entry dynamic map (signed for m and momentum,
 * unsigned for v), and one f32 absmax per block of VR_Q8_BLOCK consecutive elements. Tensors with fewer
 * than VR_Q8_MIN_NUMEL elements (biases, norms) keep f32 state: quantizing them saves little and costs
 * accuracy. 8-bit state is 1 byte per element per state tensor + 4/256 for the absmax, against 4. */
#ifndef VRAM_OPTIM_STATE_H
#define VRAM_OPTIM_STATE_H

#include <stdbool.h>
#include <stdint.h>

#define VR_Q8_BLOCK 256        /* elements per absmax block */
#define VR_Q8_MIN_NUMEL 4096   /* smaller tensors keep f32 state */

/* True when a tensor of numel elements keeps its state in 8 bits (else f32). */
static inline bool vr_q8_quantized(int64_t numel) { return numel >= VR_Q8_MIN_NUMEL; }

/* Absmax blocks of a tensor of numel elements: ceil(numel / VR_Q8_BLOCK). */
static inline int64_t vr_q8_blocks(int64_t numel) { return (numel + VR_Q8_BLOCK - 1) / VR_Q8_BLOCK; }

#endif
