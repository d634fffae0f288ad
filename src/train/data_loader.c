/* The batch loader: a split of a token stream cut into (B,T) batches, in
 * sequential or per-epoch shuffled-window order, at a resumable position. */
#include "vram/data.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "train/data_source.h"
#include "train/rng.h"

struct vr_data {
    uint32_t *all;        /* every token of the source (owned) */
    const uint32_t *tok;  /* the split: tok[0..n) points into all */
    uint64_t n;
    int B, T, vocab;
    vr_data_order order;
    uint64_t seed;
    uint64_t windows;     /* shuffled: windows of T+1 tokens at stride T */
    uint64_t per_epoch;   /* full batches per epoch */
    uint32_t *perm;       /* shuffled: window order of perm_epoch */
    uint64_t perm_epoch;
    vr_data_pos pos;
};

vr_data_config vr_data_config_default(int B, int T)
{
    vr_data_config c;
    memset(&c, 0, sizeof c);
    c.kind = VR_DATA_GENERATED;
    c.B = B;
    c.T = T;
    c.order = VR_DATA_SEQUENTIAL;
    c.seed = 1337;
    c.split = VR_SPLIT_ALL;
    return c;
}

/* Fisher-Yates over all windows, seeded by (seed, epoch). */
static void shuffle(vr_data *d, uint64_t epoch)
{
    vr_rng r = vr_rng_seed(d->seed * 0x100000001B3ull + epoch);
    for (uint64_t i = 0; i < d->windows; i++) d->perm[i] = (uint32_t)i;
    for (uint64_t i = d->windows; i > 1; i--) {
        uint64_t j = vr_rng_below(&r, i);
        uint32_t t = d->perm[i - 1];
        d->perm[i - 1] = d->perm[j];
        d->perm[j] = t;
    }
    d->perm_epoch = epoch;
}

static const char *source_name(const vr_data_config *cfg)
{
    return cfg->kind == VR_DATA_GENERATED ? "generated corpus" : cfg->path;
}

vr_status vr_data_open(const vr_data_config *cfg, vr_data **out)
{
    *out = NULL;
    const char *name = source_name(cfg);
    if (cfg->B < 1 || cfg->T < 1)
        return vr_error(VR_ERR_INVALID, "%s: batch size %d and sequence length %d must be >= 1", name,
                        cfg->B, cfg->T);
    double frac = cfg->val_fraction > 0 ? cfg->val_fraction : 0.1;
    if (cfg->split != VR_SPLIT_ALL && frac >= 1)
        return vr_error(VR_ERR_INVALID, "%s: val fraction %g must be in (0,1)", name, frac);
    if (cfg->vocab < 0)
        return vr_error(VR_ERR_INVALID, "%s: vocab %d must be >= 1", name, cfg->vocab);

    vr_data *d = calloc(1, sizeof *d);
    if (!d) return vr_error(VR_ERR_OOM, "%s: out of host memory", name);
    uint64_t total;
    vr_status s = vr_data_load_source(cfg, &d->all, &total, &d->vocab);
    if (s != VR_OK) {
        free(d);
        return s;
    }
    uint64_t head = cfg->split == VR_SPLIT_ALL ? total : (uint64_t)((double)total * (1.0 - frac));
    d->tok = cfg->split == VR_SPLIT_VAL ? d->all + head : d->all;
    d->n = cfg->split == VR_SPLIT_VAL ? total - head : head;
    d->B = cfg->B;
    d->T = cfg->T;
    d->order = cfg->order;
    d->seed = cfg->seed;

    uint64_t need = (uint64_t)cfg->B * (uint64_t)cfg->T + 1;
    if (d->n < need) {
        static const char *split_names[] = {"", " (train split)", " (val split)"};
        s = vr_error(VR_ERR_FORMAT, "%s: %llu tokens%s is too small for one batch of B*T+1 = %llu", name,
                     (unsigned long long)d->n, split_names[cfg->split], (unsigned long long)need);
        vr_data_close(d);
        return s;
    }
    if (d->order == VR_DATA_SHUFFLED) {
        d->windows = (d->n - 1) / (uint64_t)d->T;
        if (d->windows > UINT32_MAX) {
            vr_data_close(d);
            return vr_error(VR_ERR_INVALID, "%s: too many windows to shuffle; use sequential order", name);
        }
        d->per_epoch = d->windows / (uint64_t)d->B;
        d->perm = malloc(d->windows * sizeof *d->perm);
        if (!d->perm) {
            vr_data_close(d);
            return vr_error(VR_ERR_OOM, "%s: out of host memory for the window order", name);
        }
        shuffle(d, 0);
    } else {
        d->per_epoch = (d->n - 1) / ((uint64_t)d->B * (uint64_t)d->T);
    }
    *out = d;
    return VR_OK;
}

void vr_data_close(vr_data *d)
{
    if (!d) return;
    free(d->all);
    free(d->perm);
    free(d);
}

vr_status vr_data_next(vr_data *d, int32_t *tokens, int32_t *targets)
{
    const uint64_t T = (uint64_t)d->T;
    for (uint64_t b = 0; b < (uint64_t)d->B; b++) {
        uint64_t start = d->order == VR_DATA_SHUFFLED
                             ? (uint64_t)d->perm[d->pos.batch * (uint64_t)d->B + b] * T
                             : (d->pos.batch * (uint64_t)d->B + b) * T;
        const uint32_t *w = d->tok + start; /* T+1 tokens, each < vocab <= INT32_MAX */
        for (uint64_t t = 0; t < T; t++) {
            tokens[b * T + t] = (int32_t)w[t];
            targets[b * T + t] = (int32_t)w[t + 1];
        }
    }
    vr_data_pos next = d->pos;
    if (++next.batch == d->per_epoch) {
        next.batch = 0;
        next.epoch++;
    }
    return vr_data_seek(d, next);
}

vr_data_pos vr_data_tell(const vr_data *d) { return d->pos; }

vr_status vr_data_seek(vr_data *d, vr_data_pos pos)
{
    if (pos.batch >= d->per_epoch)
        return vr_error(VR_ERR_INVALID, "data position: batch %llu is past the %llu batches of an epoch",
                        (unsigned long long)pos.batch, (unsigned long long)d->per_epoch);
    if (d->order == VR_DATA_SHUFFLED && d->perm_epoch != pos.epoch) shuffle(d, pos.epoch);
    d->pos = pos;
    return VR_OK;
}

uint64_t vr_data_batches_per_epoch(const vr_data *d) { return d->per_epoch; }

uint64_t vr_data_num_tokens(const vr_data *d) { return d->n; }

int vr_data_vocab(const vr_data *d) { return d->vocab; }

/* crc32 of the split's tokens as little-endian uint16 (every state saved before tokens were held in 32 bits
 * has this fingerprint) when the vocabulary fits, else as uint32. */
uint32_t vr_data_fingerprint(const vr_data *d)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    int width = d->vocab <= 65536 ? 2 : 4;
    unsigned char buf[1 << 16];
    size_t per = sizeof buf / (size_t)width;
    for (uint64_t i = 0; i < d->n; i += per) {
        size_t k = d->n - i < per ? (size_t)(d->n - i) : per;
        for (size_t j = 0; j < k; j++) {
            uint32_t v = d->tok[i + j];
            for (int b = 0; b < width; b++) buf[j * (size_t)width + (size_t)b] = (unsigned char)(v >> (8 * b));
        }
        crc = crc32(crc, buf, (uInt)(k * (size_t)width));
    }
    return (uint32_t)crc;
}
