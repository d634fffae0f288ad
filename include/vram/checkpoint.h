/* vram — llm.c GPT-2 model files (train_gpt2.c's format, fp32 version 3).
 *
 * Layout: 256 int32 header — [0] magic 20240326, [1] version 3, [2] maxT,
 * [3] V, [4] L, [5] NH, [6] C, [7] Vp (vocab padded, e.g. 50257 -> 50304) —
 * then every parameter as fp32, little-endian, in this order:
 *   wte (Vp,C)  wpe (maxT,C)  ln1w (L,C)  ln1b (L,C)  qkvw (L,3C,C)  qkvb (L,3C)
 *   attprojw (L,C,C)  attprojb (L,C)  ln2w (L,C)  ln2b (L,C)  fcw (L,4C,C)
 *   fcb (L,4C)  fcprojw (L,C,4C)  fcprojb (L,C)  lnfw (C)  lnfb (C)
 * Weights are (out, in) as in PyTorch nn.Linear; the classifier is tied to wte.
 * tools/llmc_ckpt.py converts to and from PyTorch state dicts. */
#ifndef VRAM_CHECKPOINT_H
#define VRAM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_LLMC_MAGIC 20240326
#define VR_LLMC_VERSION_FP32 3
#define VR_LLMC_VERSION_BF16 5 /* llm.c's bf16 checkpoints: the same layout, 2-byte bfloat16 parameters */
#define VR_LLMC_HEADER_INTS 256
#define VR_LLMC_NUM_TENSORS 16

typedef struct vr_llmc_config {
    int max_seq_len;       /* maxT, e.g. 1024 */
    int vocab_size;        /* V, e.g. 50257 */
    int padded_vocab_size; /* Vp >= V, e.g. 50304 */
    int num_layers;        /* L */
    int num_heads;         /* NH, divides C */
    int channels;          /* C */
} vr_llmc_config;

/* Checks the fields are positive, Vp >= V and NH divides C; errors name `what`. */
vr_status vr_llmc_config_check(const vr_llmc_config *cfg, const char *what);

/* Element counts of the 16 tensors in file order (see the layout above). */
void vr_llmc_param_sizes(const vr_llmc_config *cfg, size_t sizes[VR_LLMC_NUM_TENSORS]);

/* Total fp32 parameters (sum of vr_llmc_param_sizes). */
size_t vr_llmc_num_params(const vr_llmc_config *cfg);

/* The name of tensor i in file order ("wte", "wpe", "ln1w", ...). */
const char *vr_llmc_tensor_name(int i);

/* Reads and validates the header (magic, version, fields, and that the file
 * size is exactly header + parameters), filling *cfg. */
vr_status vr_llmc_read_header(const char *path, vr_llmc_config *cfg);

/* Errors (naming the field, e.g. "ckpt.bin: channels is 768 in the checkpoint
 * but 512 in the model") unless the two configs describe the same shapes. */
vr_status vr_llmc_config_match(const char *path, const vr_llmc_config *file, const vr_llmc_config *model);

/* Loads the parameters into params[0..n): validates the header, matches it
 * against `model` (skipped when NULL) and checks n equals the file's count.
 * Version 3 (fp32) and version 5 (bf16, widened to fp32 exactly) are read. */
vr_status vr_llmc_load(const char *path, const vr_llmc_config *model, float *params, size_t n);

/* Saves n = vr_llmc_num_params(cfg) fp32 parameters with cfg's header, atomically. */
vr_status vr_llmc_save(const char *path, const vr_llmc_config *cfg, const float *params, size_t n);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
