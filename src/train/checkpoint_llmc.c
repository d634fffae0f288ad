/* llm.c GPT-2 model files: header of 256 int32, then fp32 parameters. */
#define _POSIX_C_SOURCE 200809L
#include "vram/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "vram/atomic_file.h"
#include "train/file_io.h"
#include "vram/graph.h"

#define HEADER_BYTES ((uint64_t)VR_LLMC_HEADER_INTS * sizeof(int32_t))

static const char *tensor_names[VR_LLMC_NUM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
};

const char *vr_llmc_tensor_name(int i)
{
    return i >= 0 && i < VR_LLMC_NUM_TENSORS ? tensor_names[i] : "?";
}

/* The header fields as (name, pointer) pairs, in header order [2..7]. */
typedef struct field { const char *name; int value; } field;

static void fields_of(const vr_llmc_config *c, field f[6])
{
    f[0] = (field){"max_seq_len", c->max_seq_len};
    f[1] = (field){"vocab_size", c->vocab_size};
    f[2] = (field){"num_layers", c->num_layers};
    f[3] = (field){"num_heads", c->num_heads};
    f[4] = (field){"channels", c->channels};
    f[5] = (field){"padded_vocab_size", c->padded_vocab_size};
}

vr_status vr_llmc_config_check(const vr_llmc_config *cfg, const char *what)
{
    field f[6];
    fields_of(cfg, f);
    for (int i = 0; i < 6; i++)
        if (f[i].value <= 0 || f[i].value > (1 << 24))
            return vr_error(VR_ERR_FORMAT, "%s: %s is %d, expected 1 to %d", what, f[i].name, f[i].value,
                            1 << 24);
    if (cfg->padded_vocab_size < cfg->vocab_size)
        return vr_error(VR_ERR_FORMAT, "%s: padded_vocab_size %d is smaller than vocab_size %d", what,
                        cfg->padded_vocab_size, cfg->vocab_size);
    if (cfg->channels % cfg->num_heads != 0)
        return vr_error(VR_ERR_FORMAT, "%s: num_heads %d does not divide channels %d", what,
                        cfg->num_heads, cfg->channels);
    vr_gpt_config c = {.L = cfg->num_layers, .C = cfg->channels, .NH = cfg->num_heads,
                       .V = cfg->vocab_size, .Vp = cfg->padded_vocab_size, .maxT = cfg->max_seq_len};
    int64_t n; /* unchecked, the size product can wrap 2^64 to a small number that matches the file size */
    if (!vr_gpt_num_params_checked(&c, &n) || (uint64_t)n > (UINT64_MAX - HEADER_BYTES) / 4)
        return vr_error(VR_ERR_FORMAT, "%s: num_layers %d, channels %d, padded_vocab_size %d, max_seq_len %d: "
                        "the parameter bytes overflow 64 bits", what, cfg->num_layers, cfg->channels,
                        cfg->padded_vocab_size, cfg->max_seq_len);
    return VR_OK;
}

void vr_llmc_param_sizes(const vr_llmc_config *cfg, size_t s[VR_LLMC_NUM_TENSORS])
{
    vr_gpt_config c = {.L = cfg->num_layers, .C = cfg->channels, .NH = cfg->num_heads,
                       .V = cfg->vocab_size, .Vp = cfg->padded_vocab_size, .maxT = cfg->max_seq_len};
    if (c.Vp == 0)
        c.V = 0; /* the header's Vp as it stands: 0 rounds V = 0 up to 0 rows of wte */
    int64_t sizes[VR_LLMC_NUM_TENSORS];
    vr_gpt_param_sizes(&c, sizes);
    for (int i = 0; i < VR_LLMC_NUM_TENSORS; i++)
        s[i] = (size_t)sizes[i];
}

size_t vr_llmc_num_params(const vr_llmc_config *cfg)
{
    size_t s[VR_LLMC_NUM_TENSORS], n = 0;
    vr_llmc_param_sizes(cfg, s);
    for (int i = 0; i < VR_LLMC_NUM_TENSORS; i++) n += s[i];
    return n;
}

/* Opens path, reads + validates the header; leaves f positioned at the params. */
static vr_status open_checked(const char *path, vr_llmc_config *cfg, FILE **out, int *esize)
{
    *out = NULL;
    *esize = 4;
    FILE *f;
    uint64_t size;
    vr_status s = vr__file_open_read(path, &f, &size);
    if (s != VR_OK) return s;
    int32_t h[VR_LLMC_HEADER_INTS];
    if (size < HEADER_BYTES || fread(h, 1, HEADER_BYTES, f) != HEADER_BYTES) {
        s = vr_error(VR_ERR_FORMAT, "%s: %llu bytes is too small for the %llu-byte llm.c model header",
                     path, (unsigned long long)size, (unsigned long long)HEADER_BYTES);
        goto fail;
    }
    if (h[0] != VR_LLMC_MAGIC) {
        s = vr_error(VR_ERR_FORMAT, "%s: wrong magic %d (an llm.c GPT-2 model file starts with %d)", path,
                     h[0], VR_LLMC_MAGIC);
        goto fail;
    }
    if (h[1] != VR_LLMC_VERSION_FP32 && h[1] != VR_LLMC_VERSION_BF16) {
        s = vr_error(VR_ERR_FORMAT, "%s: unsupported model file version %d (expected %d, fp32 with padded "
                     "vocab, or %d, bf16)", path, h[1], VR_LLMC_VERSION_FP32, VR_LLMC_VERSION_BF16);
        goto fail;
    }
    *esize = h[1] == VR_LLMC_VERSION_BF16 ? 2 : 4;
    cfg->max_seq_len = h[2];
    cfg->vocab_size = h[3];
    cfg->num_layers = h[4];
    cfg->num_heads = h[5];
    cfg->channels = h[6];
    cfg->padded_vocab_size = h[7];
    if ((s = vr_llmc_config_check(cfg, path)) != VR_OK) goto fail;
    uint64_t want = HEADER_BYTES + (uint64_t)vr_llmc_num_params(cfg) * (uint64_t)*esize; /* checked above */
    if (size != want) {
        s = vr_error(VR_ERR_FORMAT, "%s: file is %llu bytes but its header implies %llu (%zu parameters)%s",
                     path, (unsigned long long)size, (unsigned long long)want, vr_llmc_num_params(cfg),
                     size < want ? ": truncated" : "");
        goto fail;
    }
    *out = f;
    return VR_OK;
fail:
    fclose(f);
    return s;
}

vr_status vr_llmc_read_header(const char *path, vr_llmc_config *cfg)
{
    FILE *f;
    int esize;
    vr_status s = open_checked(path, cfg, &f, &esize);
    if (s == VR_OK) fclose(f);
    return s;
}

vr_status vr_llmc_config_match(const char *path, const vr_llmc_config *file, const vr_llmc_config *model)
{
    field a[6], b[6];
    fields_of(file, a);
    fields_of(model, b);
    for (int i = 0; i < 6; i++)
        if (a[i].value != b[i].value)
            return vr_error(VR_ERR_FORMAT, "%s: %s is %d in the checkpoint but %d in the model", path,
                            a[i].name, a[i].value, b[i].value);
    return VR_OK;
}

vr_status vr_llmc_load(const char *path, const vr_llmc_config *model, float *params, size_t n)
{
    vr_llmc_config cfg;
    FILE *f;
    int esize;
    vr_status s = open_checked(path, &cfg, &f, &esize);
    if (s != VR_OK) return s;
    if (model && (s = vr_llmc_config_match(path, &cfg, model)) != VR_OK) goto done;
    size_t want = vr_llmc_num_params(&cfg);
    if (n != want) {
        s = vr_error(VR_ERR_INVALID, "%s: the checkpoint holds %zu parameters but the buffer has %zu", path,
                     want, n);
        goto done;
    }
    if (esize == 4 && fread(params, sizeof(float), n, f) != n)
        s = vr_error(VR_ERR_IO, "%s: read of %zu parameters failed: %s", path, n,
                     ferror(f) ? strerror(errno) : "short read");
    /* bf16: read into the upper half of each float's slot, from the end back, then widen in place
     * (bf16 is the top 16 bits of an fp32: the conversion is exact) */
    uint16_t *half = (uint16_t *)params;
    if (esize == 2 && fread(half, sizeof(uint16_t), n, f) != n)
        s = vr_error(VR_ERR_IO, "%s: read of %zu bf16 parameters failed: %s", path, n,
                     ferror(f) ? strerror(errno) : "short read");
    else if (esize == 2)
        for (size_t i = n; i-- > 0;) {
            uint32_t bits = (uint32_t)half[i] << 16;
            memcpy(&params[i], &bits, sizeof bits);
        }
done:
    fclose(f);
    return s;
}

vr_status vr_llmc_save(const char *path, const vr_llmc_config *cfg, const float *params, size_t n)
{
    vr_status s = vr_llmc_config_check(cfg, path);
    if (s != VR_OK) return s;
    if (n != vr_llmc_num_params(cfg))
        return vr_error(VR_ERR_INVALID, "%s: the model has %zu parameters but the buffer has %zu", path,
                        vr_llmc_num_params(cfg), n);
    int32_t h[VR_LLMC_HEADER_INTS] = {VR_LLMC_MAGIC, VR_LLMC_VERSION_FP32, cfg->max_seq_len, cfg->vocab_size,
                                      cfg->num_layers, cfg->num_heads, cfg->channels, cfg->padded_vocab_size};
    vr_atomic_file af;
    if ((s = vr_atomic_open(&af, path)) != VR_OK) return s;
    vr_atomic_write(&af, h, sizeof h);
    vr_atomic_write(&af, params, n * sizeof(float));
    return vr_atomic_commit(&af);
}
