/* vram train — a whole run as `vram train` does it: the memory plan first,
 * progress per step (with memory figures), evaluations and saves, then a
 * summary of the loss, the speed, and the planned against the really
 * allocated bytes per role. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/loop_internal.h"
#include "vram/atomic_file.h"
#include "vram/util.h"

static const char *sz(uint64_t b, char *buf) { return vr_format_size(b, buf, 32); }

void vr_train_print_memory(vr_trainer *t, FILE *out)
{
    const vr_plan *p = t->plan;
    vr_exec_memory m;
    vr_exec_get_memory(t->exec, &m);
    char a[32], b[32], c[32], d[32], e[32];
    bool planned = t->cfg.memory == VR_MEMORY_PLANNED;
    fprintf(out, "memory    planned vs really allocated, training step on %s (%s)\n", vr_device_name(t->dev),
            planned ? "planned arena" : "dynamic: caching allocator");
    fprintf(out, "%-8s %14s %14s %14s %14s\n", "role", "plan at peak", "run at peak", "plan max", "run max");
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        fprintf(out, "%-8s %14s %14s %14s %14s%s\n", vr_role_name((vr_role)r), sz(p->at_peak[r], a),
                sz(m.at_peak[r], b), sz(p->max_live[r], c), sz(m.max_live[r], d),
                p->at_peak[r] == m.at_peak[r] && p->max_live[r] == m.max_live[r] ? "" : "   DIFFERS");
    fprintf(out, "%-8s %14s %14s %14s %14s%s\n", "peak", sz(p->peak, a), sz(m.peak, b), "", "",
            p->peak == m.peak ? "   (equal, bytes)" : "   DIFFERS");
    if (planned) {
        fprintf(out, "device    arena %s planned, %s allocated once; device used at most %s\n", sz(p->arena_size, a),
                sz(m.arena, b), sz(m.device_peak, c));
        if (t->eexec) {
            vr_exec_memory em;
            vr_exec_get_memory(t->eexec, &em);
            fprintf(out, "          (with the evaluation step's arena, %s: its no-grad graph shares the parameters)\n",
                    sz(em.arena, a));
        }
    } else
        fprintf(out, "device    allocator peak allocated %s (plan %s), peak reserved %s (plan %s); device used at most "
                "%s\n", sz(m.peak_allocated, a), sz(p->dynamic.peak_allocated, b), sz(m.peak_reserved, c),
                sz(p->dynamic.peak_reserved, d), sz(m.device_peak, e));
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        if (p->host_total[r] || m.host[r])
            fprintf(out, "host      %-8s planned %s, bound %s (pinned host memory)%s\n", vr_role_name((vr_role)r),
                    sz(p->host_total[r], a), sz(m.host[r], b), p->host_total[r] == m.host[r] ? "" : "   DIFFERS");
    if (p->host_size)
        fprintf(out, "host      arena %s planned, %s allocated once\n", sz(p->host_size, a), sz(m.host_arena, b));
    if (vr_device_kind_of(t->dev) == VR_DEVICE_CUDA) {
        uint64_t pk = vr_trainer_process_peak(t);
        fprintf(out, "process   CUDA context %s; this process's device use at most %s (NVML)", sz(vr_trainer_context_bytes(t), a),
                pk ? sz(pk, b) : "unknown");
        if (t->cfg.max_memory)
            fprintf(out, ", --max-memory %s", sz(t->cfg.max_memory, c));
        fprintf(out, "\n");
        size_t stack;
        uint64_t grown = vr_cuda_stack_growth(vr_device_index(t->dev), &stack);
        if (grown)
            fprintf(out, "process   a library kernel grew the CUDA stack from %d to %zu bytes a thread: the context "
                    "holds %s more than measured\n", VR_CUDA_STACK_BYTES, stack, sz(grown, a));
    }
}

static cJSON *memory_json(vr_trainer *t)
{
    const vr_plan *p = t->plan;
    vr_exec_memory m;
    vr_exec_get_memory(t->exec, &m);
    cJSON *o = cJSON_CreateObject();
    cJSON *roles = cJSON_AddObjectToObject(o, "roles");
    for (int r = 0; r < VR_ROLE_COUNT; r++) {
        cJSON *x = cJSON_AddObjectToObject(roles, vr_role_name((vr_role)r));
        cJSON_AddNumberToObject(x, "plan_at_peak", (double)p->at_peak[r]);
        cJSON_AddNumberToObject(x, "run_at_peak", (double)m.at_peak[r]);
        cJSON_AddNumberToObject(x, "plan_max", (double)p->max_live[r]);
        cJSON_AddNumberToObject(x, "run_max", (double)m.max_live[r]);
    }
    cJSON_AddNumberToObject(o, "plan_peak", (double)p->peak);
    cJSON_AddNumberToObject(o, "run_peak", (double)m.peak);
    cJSON_AddStringToObject(o, "mode", t->cfg.memory == VR_MEMORY_PLANNED ? "planned" : "dynamic");
    cJSON_AddNumberToObject(o, "plan_arena", (double)p->arena_size);
    cJSON_AddNumberToObject(o, "run_arena", (double)m.arena);
    cJSON_AddNumberToObject(o, "device_peak", (double)m.device_peak);
    cJSON *host = cJSON_AddObjectToObject(o, "host");
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        if (p->host_total[r] || m.host[r]) {
            cJSON *x = cJSON_AddObjectToObject(host, vr_role_name((vr_role)r));
            cJSON_AddNumberToObject(x, "plan", (double)p->host_total[r]);
            cJSON_AddNumberToObject(x, "run", (double)m.host[r]);
        }
    cJSON_AddNumberToObject(host, "plan_arena", (double)p->host_size);
    cJSON_AddNumberToObject(host, "run_arena", (double)m.host_arena);
    if (vr_device_kind_of(t->dev) == VR_DEVICE_CUDA) {
        cJSON_AddNumberToObject(o, "context", (double)vr_trainer_context_bytes(t));
        cJSON_AddNumberToObject(o, "process_peak", (double)vr_trainer_process_peak(t));
        size_t stack;
        cJSON_AddNumberToObject(o, "context_grown", (double)vr_cuda_stack_growth(vr_device_index(t->dev), &stack));
        if (t->cfg.max_memory)
            cJSON_AddNumberToObject(o, "max_memory", (double)t->cfg.max_memory);
    }
    if (p->has_dynamic) {
        cJSON_AddNumberToObject(o, "plan_peak_reserved", (double)p->dynamic.peak_reserved);
        cJSON_AddNumberToObject(o, "run_peak_reserved", (double)m.peak_reserved);
        cJSON_AddNumberToObject(o, "plan_peak_allocated", (double)p->dynamic.peak_allocated);
        cJSON_AddNumberToObject(o, "run_peak_allocated", (double)m.peak_allocated);
        vr_device_calls dc; /* what the device was asked: the allocator's driver calls, mostly */
        vr_device_get_calls(t->dev, &dc);
        cJSON_AddNumberToObject(o, "run_device_calls", (double)vr_device_calls_vm_total(&dc));
        cJSON_AddNumberToObject(o, "run_device_maps", (double)dc.map);
    }
    return o;
}

static void emit_json(FILE *out, cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        fprintf(out, "%s\n", s);
    free(s);
    cJSON_Delete(o);
    fflush(out);
}

static vr_status saves(vr_trainer *t, const vr_train_run_opts *o)
{
    vr_status st = VR_OK;
    char what[512];
    if (o->save && !(st = vr_trainer_save_model(t, o->save)) && o->on_event) { /* every rank: gathered, rank 0 writes */
        snprintf(what, sizeof what, "checkpoint %s", o->save);
        o->on_event(o->on_event_ctx, what);
    }
    if (!st && o->save_state && !(st = vr_trainer_save_state(t, o->save_state)) && o->on_event) {
        snprintf(what, sizeof what, "checkpoint %s", o->save_state);
        o->on_event(o->on_event_ctx, what);
    }
    return st;
}

static vr_status eval_report(vr_trainer *t, vr_progress *pr, double *val)
{
    vr_status st = vr_trainer_eval(t, val);
    if (!st)
        vr_progress_eval(pr, t->step, *val);
    return st;
}

static void print_summary(vr_trainer *t, const vr_train_summary *s, bool json, FILE *out)
{
    bool graph_on = false;
    const char *graph_off = NULL; /* CUDA graphs asked for but not run: why */
    if (!vr_exec_cuda_graph_state(t->exec, &graph_on, &graph_off) || graph_on)
        graph_off = NULL;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "summary");
        cJSON_AddNumberToObject(o, "steps", (double)s->steps);
        cJSON_AddNumberToObject(o, "loss_first", s->loss_first);
        cJSON_AddNumberToObject(o, "loss_last", s->loss_last);
        if (isfinite(s->val_loss))
            cJSON_AddNumberToObject(o, "val_loss", s->val_loss);
        cJSON_AddNumberToObject(o, "tokens_per_s", s->tokens_per_s);
        cJSON_AddNumberToObject(o, "seconds", s->seconds);
        if (s->loss_scale > 0) {
            cJSON_AddNumberToObject(o, "loss_scale", s->loss_scale);
            cJSON_AddNumberToObject(o, "skipped_steps", (double)s->skipped);
        }
        if (graph_off)
            cJSON_AddStringToObject(o, "cuda_graph_off", graph_off);
        if (*vr_exec_attention_kernels(t->exec))
            cJSON_AddStringToObject(o, "attention", vr_exec_attention_kernels(t->exec));
        cJSON_AddItemToObject(o, "memory", memory_json(t));
        if (t->cfg.comm) {
            cJSON_AddNumberToObject(o, "ranks", vr_comm_size(t->cfg.comm));
            cJSON_AddStringToObject(o, "comm", vr_comm_engine_name(t->cfg.comm));
            cJSON_AddNumberToObject(o, "comm_own_bytes", (double)vr_comm_own_bytes(t->cfg.comm));
        }
        emit_json(out, o);
        return;
    }
    fprintf(out, "\nsummary   %lld steps in %.1f s", (long long)s->steps, s->seconds);
    if (s->steps > 0)
        fprintf(out, ": loss %.4f -> %.4f", s->loss_first, s->loss_last);
    if (isfinite(s->val_loss))
        fprintf(out, ", val loss %.4f", s->val_loss);
    if (s->steps > 0)
        fprintf(out, ", %.0f tokens/s", s->tokens_per_s);
    if (s->loss_scale > 0)
        fprintf(out, "\n          fp16 loss scale %g; %lld step%s skipped (gradient overflow)", s->loss_scale,
                (long long)s->skipped, s->skipped == 1 ? "" : "s");
    if (graph_off)
        fprintf(out, "\n          cuda graph: off %s", graph_off);
    if (*vr_exec_attention_kernels(t->exec))
        fprintf(out, "\n          attention: %s", vr_exec_attention_kernels(t->exec));
    fprintf(out, "\n\n");
    vr_train_print_memory(t, out);
    if (t->cfg.comm) {
        char b[32];
        fprintf(out, "ranks     %d (%s, ZeRO %d); rank 0's memory above; %s's own device buffers: %s (outside the "
                "arena, measured as this rank joined)\n", vr_comm_size(t->cfg.comm), vr_comm_engine_name(t->cfg.comm),
                t->cfg.step.zero, vr_comm_engine_name(t->cfg.comm),
                vr_format_size(vr_comm_own_bytes(t->cfg.comm), b, sizeof b));
    }
}

vr_status vr_train_run(const vr_train_config *c, const vr_train_run_opts *o, FILE *out, vr_train_summary *sum)
{
    vr_train_summary s = {.val_loss = NAN, .loss_first = NAN, .loss_last = NAN};
    vr_trainer *t = NULL;
    vr_status st = VR_OK;
    if (o->save_state && (st = vr_atomic_check_writable(o->save_state)))
        return st;
    st = vr_trainer_create(c, &t);
    if (st)
        return st;
    /* output files are checked before the first step: found unwritable at the end, the run would be lost */
    const char *models[2] = {o->save, o->save_init};
    for (int i = 0; i < 2; i++)
        if (models[i] && (st = vr_trainer_check_save(t, models[i])))
            goto done;
    bool json = o->progress == VR_PROGRESS_JSON, quiet = o->progress == VR_PROGRESS_QUIET;
    if (o->save_init && (st = vr_trainer_save_model(t, o->save_init)))
        goto done;
    if (o->eval_every >= 0 && (st = vr__trainer_eval_setup(t)))
        goto done;
    if (o->print_plan && !json && !quiet) {
        vr_plan_print(t->plan, out, false);
        fprintf(out, "\n");
    } else if (o->print_plan && json) {
        char *js = vr_plan_json(t->plan, false);
        cJSON *p = js ? cJSON_Parse(js) : NULL;
        free(js);
        if (p) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "event", "plan");
            cJSON_AddItemToObject(e, "plan", p);
            emit_json(out, e);
        }
    }
    int64_t todo = c->steps - t->step;
    vr_progress_opts po = {o->progress, c->steps, todo > 25 ? todo / 25 : 1};
    vr_progress *pr = NULL;
    if ((st = vr_progress_open(out, &po, &pr)))
        goto done;
    if (t->step > 0)
        vr_progress_note(pr, "resumed at step %lld of %lld", (long long)t->step, (long long)c->steps);
    if (t->step >= c->steps)
        vr_progress_note(pr, "nothing to train: the run is already at step %lld (raise --steps to go on)",
                         (long long)t->step);
    uint64_t t0 = vr_now_ns(), tokens = 0;
    bool evaluated = false;
    while (t->step < c->steps) {
        vr_train_step_info info;
        /* the next step queued behind this one where nothing runs between them (an evaluation or a save reads
         * the weights this step leaves) */
        int64_t n = t->step + 1;
        vr_trainer_lookahead(t, n < c->steps && !(o->eval_every > 0 && n % o->eval_every == 0) &&
                                    !(o->save_every > 0 && n % o->save_every == 0));
        if ((st = vr_trainer_step(t, &info)))
            break;
        vr_exec_memory m;
        vr_exec_get_memory(t->exec, &m);
        vr_progress_mem mem[2] = {{"live_peak", m.peak}, {"device", m.device_peak}};
        bool fp16 = c->step.precision == VR_PREC_FP16;
        vr_step_report r = {info.step, info.loss, info.lr, info.ms, info.tokens, info.grad_norm, 2, mem,
                            fp16 ? info.loss_scale : 0, info.skipped};
        if (fp16) {
            int good = 0;
            float next = 0;
            vr_exec_get_loss_scale(t->exec, &next, &good);
            s.skipped = info.skipped_total;
            s.loss_scale = next;
        }
        vr_progress_step(pr, &r);
        if (!isfinite(info.loss)) {
            st = vr_error(VR_ERR_INVALID, "train: the loss became %g at step %lld (try a lower vr_train_config.hp.lr "
                          "or vr_step_config.grad_clip 1.0)", info.loss, (long long)info.step);
            break;
        }
        if (s.steps++ == 0)
            s.loss_first = info.loss;
        s.loss_last = info.loss;
        tokens += info.tokens;
        evaluated = false;
        if (o->eval_every > 0 && t->step % o->eval_every == 0) {
            if ((st = eval_report(t, pr, &s.val_loss)))
                break;
            evaluated = true;
        }
        if (o->save_every > 0 && t->step % o->save_every == 0 && t->step < c->steps && (st = saves(t, o)))
            break;
    }
    s.seconds = (double)(vr_now_ns() - t0) / 1e9;
    s.tokens_per_s = s.seconds > 0 ? (double)tokens / s.seconds : 0;
    if (!st && o->eval_every >= 0 && !evaluated)
        st = eval_report(t, pr, &s.val_loss);
    if (!st)
        st = saves(t, o);
    vr_progress_close(pr);
    if (!st && !quiet)
        print_summary(t, &s, json, out);
done:
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", vr_last_error());
        vr_trainer_free(t);
        st = vr_error(st, "%s", msg);
    } else {
        vr_trainer_free(t);
    }
    if (sum)
        *sum = s;
    return st;
}
