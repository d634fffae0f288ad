/* The HTML report's data: the plan's JSON plus compact per-node arrays and the
 * tensors live at the peak.
 *
 * Size: the per-node arrays are plain numbers and short strings, about 120
 * bytes per node, so a 10,000-node step's blob stays near 1.2 MB; the peak
 * table holds only the tensors live at the peak node. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "vram/prof.h"

/* Tensor t (a storage tensor) occupies bytes during node i: the plan's rule
 * (lifetime.c): an in-place output takes over its input's bytes after first. */
static bool live_at(const vr_plan_tensor *pt, int t, int i)
{
    if (pt->first < 0 || pt->bytes == 0)
        return false;
    int from = pt->base == t ? pt->first : pt->first + 1;
    return from <= i && i <= pt->last;
}

static void add_shape(cJSON *o, const vr_tensor *x)
{
    cJSON *a = cJSON_AddArrayToObject(o, "shape");
    for (int d = 0; d < x->ndim; d++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)x->shape[d]));
}

static cJSON *peak_tensors(const vr_plan *p)
{
    const vr_graph *g = p->graph;
    cJSON *arr = cJSON_CreateArray();
    if (!arr || p->peak_node < 0)
        return arr;
    for (int t = 0; t < p->n_tensors; t++) {
        const vr_plan_tensor *pt = &p->tensors[t];
        const vr_tensor *x = &g->tensors[t];
        if (x->view_of >= 0 || !live_at(pt, t, p->peak_node))
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", x->name);
        cJSON_AddStringToObject(o, "role", vr_role_name(pt->role));
        cJSON_AddStringToObject(o, "dtype", vr_dtype_name(x->dtype));
        add_shape(o, x);
        cJSON_AddNumberToObject(o, "bytes", (double)pt->bytes);
        cJSON_AddStringToObject(o, "producer", x->producer >= 0 ? g->nodes[x->producer].name : "");
        cJSON_AddNumberToObject(o, "first", pt->first);
        cJSON_AddNumberToObject(o, "last", pt->last);
        cJSON_AddBoolToObject(o, "persistent", pt->persistent);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static cJSON *nodes(const vr_plan *p)
{
    const vr_graph *g = p->graph;
    cJSON *o = cJSON_CreateObject();
    cJSON *name = cJSON_AddArrayToObject(o, "name");
    cJSON *op = cJSON_AddArrayToObject(o, "op");
    cJSON *phase = cJSON_AddArrayToObject(o, "phase");
    for (int i = 0; i < p->n_nodes; i++) {
        const vr_node *n = &g->nodes[i];
        cJSON_AddItemToArray(name, cJSON_CreateString(n->name));
        cJSON_AddItemToArray(op, cJSON_CreateString(vr_op_name(n->op)));
        cJSON_AddItemToArray(phase, cJSON_CreateString(vr_phase_name(n->phase)));
    }
    return o;
}

/* The allocator's segments at the peak, compact: [{size, type, blocks: [[offset, size, state]]}]
 * with state 1 allocated, 0 free (cache); at most 1000 segments. */
static cJSON *segments(const char *snapshot_json)
{
    cJSON *snap = snapshot_json ? cJSON_Parse(snapshot_json) : NULL;
    cJSON *out = cJSON_CreateArray();
    const cJSON *seg, *segs = cJSON_GetObjectItemCaseSensitive(snap, "segments");
    int n = 0;
    cJSON_ArrayForEach(seg, segs) {
        if (n++ >= 1000)
            break;
        const cJSON *base = cJSON_GetObjectItemCaseSensitive(seg, "address");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(seg, "total_size");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(seg, "segment_type");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "size", cJSON_IsNumber(size) ? size->valuedouble : 0);
        cJSON_AddStringToObject(o, "type", cJSON_IsString(type) ? type->valuestring : "");
        cJSON *bl = cJSON_AddArrayToObject(o, "blocks");
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(seg, "blocks")) {
            const cJSON *addr = cJSON_GetObjectItemCaseSensitive(b, "address");
            const cJSON *bs = cJSON_GetObjectItemCaseSensitive(b, "size");
            const cJSON *state = cJSON_GetObjectItemCaseSensitive(b, "state");
            cJSON *e = cJSON_CreateArray();
            cJSON_AddItemToArray(e, cJSON_CreateNumber(cJSON_IsNumber(addr) && cJSON_IsNumber(base)
                                                           ? addr->valuedouble - base->valuedouble : 0));
            cJSON_AddItemToArray(e, cJSON_CreateNumber(cJSON_IsNumber(bs) ? bs->valuedouble : 0));
            cJSON_AddItemToArray(e, cJSON_CreateNumber(cJSON_IsString(state) &&
                                                       !strcmp(state->valuestring, "active_allocated")));
            cJSON_AddItemToArray(bl, e);
        }
        cJSON_AddItemToArray(out, o);
    }
    cJSON_Delete(snap);
    return out;
}

static cJSON *numbers(const uint64_t *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

void *vr_report_data(const vr_plan *p, const vr_fit_result *fit, const vr_report_run *run, const char *title)
{
    char *js = vr_plan_json(p, false);
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    free(js);
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "title", title ? title : "vram memory report");
    cJSON *roles = cJSON_AddArrayToObject(root, "role_order");
    for (int r = 0; r < VR_ROLE_COUNT; r++)
        cJSON_AddItemToArray(roles, cJSON_CreateString(vr_role_name((vr_role)r)));
    cJSON_AddItemToObject(root, "nodes", nodes(p));
    cJSON_AddItemToObject(root, "live", numbers(p->live, (size_t)p->n_nodes * VR_ROLE_COUNT));
    if (p->has_dynamic) {
        cJSON *dy = cJSON_GetObjectItem(root, "dynamic");
        cJSON_AddItemToObject(dy, "allocated", numbers(p->dynamic.allocated, (size_t)p->n_nodes));
        cJSON_AddItemToObject(dy, "reserved", numbers(p->dynamic.reserved, (size_t)p->n_nodes));
        if (p->dynamic.snapshot) {
            cJSON_AddNumberToObject(dy, "snapshot_node", p->dynamic.snapshot_node);
            cJSON_AddNumberToObject(dy, "largest_free", (double)p->dynamic.largest_free);
            cJSON_AddItemToObject(dy, "segments", segments(p->dynamic.snapshot));
        }
    }
    cJSON_AddItemToObject(root, "peak_tensors", peak_tensors(p));
    if (run) {
        cJSON *r = cJSON_AddObjectToObject(root, "run");
        cJSON_AddNumberToObject(r, "steps", run->steps);
        cJSON_AddStringToObject(r, "device", run->device ? run->device : "cpu");
        cJSON *ms = cJSON_AddArrayToObject(r, "node_ms");
        for (int i = 0; i < p->n_nodes; i++)
            cJSON_AddItemToArray(ms, cJSON_CreateNumber(run->node_ms[i]));
        cJSON_AddItemToObject(r, "live", numbers(run->live, (size_t)p->n_nodes));
    }
    if (fit) {
        cJSON *f = vr_fit_json(fit);
        if (f)
            cJSON_AddItemToObject(root, "fit", f);
    }
    return root;
}
