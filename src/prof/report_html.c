/* The HTML report file: page head, the data blob, page tail, written
 * atomically (vram/atomic_file.h) so an error leaves no partial file. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "vram/atomic_file.h"
#include "vram/prof.h"

/* Inside <script> the text "</" could close the element: write "<\/" instead
 * (the same string to JSON). Returns the escaped copy (caller frees). */
static char *escape_script(const char *s)
{
    size_t n = strlen(s), extra = 0;
    for (size_t i = 0; i + 1 < n; i++)
        extra += s[i] == '<' && s[i + 1] == '/';
    char *o = malloc(n + extra + 1), *w = o;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        *w++ = s[i];
        if (s[i] == '<' && s[i + 1] == '/')
            *w++ = '\\';
    }
    *w = 0;
    return o;
}

vr_status vr_report_write_html(const char *path, const void *data)
{
    char *js = data ? cJSON_PrintUnformatted((const cJSON *)data) : NULL;
    char *esc = js ? escape_script(js) : NULL;
    free(js);
    if (!esc)
        return vr_error(VR_ERR_OOM, "%s: out of memory building the report", path);
    vr_atomic_file af;
    vr_status st = vr_atomic_open(&af, path);
    if (st == VR_OK) {
        vr_atomic_write(&af, vr_report_page_head, strlen(vr_report_page_head));
        vr_atomic_write(&af, esc, strlen(esc));
        vr_atomic_write(&af, vr_report_page_tail, strlen(vr_report_page_tail));
        st = vr_atomic_commit(&af);
    }
    free(esc);
    return st;
}
