/* Learning-rate schedules: linear warmup, then constant or cosine decay. */
#include "vram/schedule.h"

#include <math.h>
#include <string.h>

double vr_lr_at(const vr_lr_schedule *s, int64_t step)
{
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return s->lr_max * (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == VR_LR_CONSTANT) return s->lr_max;
    double lr_min = s->lr_max * s->min_frac;
    int64_t decay_steps = s->total_steps - s->warmup_steps;
    if (decay_steps <= 0 || step >= s->total_steps) return lr_min;
    double ratio = (double)(step - s->warmup_steps) / (double)decay_steps; /* [0,1) */
    double coeff = 0.5 * (1.0 + cos(3.14159265358979323846 * ratio));                       /* 1 -> 0 */
    return lr_min + coeff * (s->lr_max - lr_min);
}

vr_status vr_lr_check(const vr_lr_schedule *s)
{
    if (!(s->lr_max > 0) || !isfinite(s->lr_max))
        return vr_error(VR_ERR_INVALID, "learning rate %g must be a positive number", s->lr_max);
    if (s->warmup_steps < 0)
        return vr_error(VR_ERR_INVALID, "warmup steps %lld must be >= 0", (long long)s->warmup_steps);
    if (s->kind == VR_LR_COSINE) {
        if (!(s->min_frac >= 0 && s->min_frac <= 1))
            return vr_error(VR_ERR_INVALID, "minimum lr fraction %g must be in [0,1]", s->min_frac);
        if (s->warmup_steps > s->total_steps)
            return vr_error(VR_ERR_INVALID, "warmup steps %lld exceed the %lld total steps",
                            (long long)s->warmup_steps, (long long)s->total_steps);
    }
    return VR_OK;
}

vr_status vr_lr_parse_kind(const char *text, const char *what, vr_lr_kind *out)
{
    if (text && strcmp(text, "constant") == 0) *out = VR_LR_CONSTANT;
    else if (text && strcmp(text, "cosine") == 0) *out = VR_LR_COSINE;
    else
        return vr_error(VR_ERR_INVALID, "%s: unknown schedule '%s' (expected constant or cosine)", what,
                        text ? text : "");
    return VR_OK;
}

const char *vr_lr_kind_name(vr_lr_kind kind) { return kind == VR_LR_COSINE ? "cosine" : "constant"; }
