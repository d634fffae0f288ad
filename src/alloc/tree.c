/* Intrusive AVL tree of blocks (see tree.h). Recursive insert and remove on
 * the left/right/height fields of vr_block; depth is O(log n). */
#include "alloc/tree.h"

#include "alloc/internal.h"

static inline int cmp_u(uintptr_t x, uintptr_t y) { return (x > y) - (x < y); }

static inline int cmp(vra_order o, const vr_block *x, const vr_block *y)
{
    if (x->stream != y->stream)
        return cmp_u(x->stream, y->stream);
    if (o == VRA_BY_SIZE && x->size != y->size)
        return cmp_u(x->size, y->size);
    return cmp_u(x->addr, y->addr);
}

int vra_tree_cmp(const vra_tree *t, const vr_block *a, const vr_block *b) { return cmp(t->order, a, b); }

static int height(const vr_block *n) { return n ? n->height : 0; }

static void update(vr_block *n)
{
    int hl = height(n->left), hr = height(n->right);
    n->height = 1 + (hl > hr ? hl : hr);
}

static vr_block *rotate_right(vr_block *n)
{
    vr_block *l = n->left;
    n->left = l->right;
    l->right = n;
    update(n);
    update(l);
    return l;
}

static vr_block *rotate_left(vr_block *n)
{
    vr_block *r = n->right;
    n->right = r->left;
    r->left = n;
    update(n);
    update(r);
    return r;
}

static vr_block *rebalance(vr_block *n)
{
    update(n);
    int bal = height(n->left) - height(n->right);
    if (bal > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (bal < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

void vra_tree_init(vra_tree *t, vra_order order)
{
    t->root = NULL;
    t->order = order;
    t->count = 0;
}

/* Sets *side to its new subtree and rebalances n, unless the subtree's root
 * and height stayed the same: then nothing above it changes either. */
static vr_block *settle(vr_block *n, vr_block **side, vr_block *old, int old_height, vr_block *now)
{
    *side = now;
    if (now == old && height(now) == old_height)
        return n;
    return rebalance(n);
}

static vr_block *insert(vr_block *n, vr_block *b, vra_order order)
{
    if (!n)
        return b;
    vr_block **side = cmp(order, b, n) < 0 ? &n->left : &n->right;
    vr_block *old = *side;
    int h = height(old);
    return settle(n, side, old, h, insert(old, b, order));
}

void vra_tree_insert(vra_tree *t, vr_block *b)
{
    b->left = b->right = NULL;
    b->height = 1;
    t->root = insert(t->root, b, t->order);
    t->count++;
}

/* Detaches the minimum of subtree n into *min; returns the new subtree. */
static vr_block *remove_min(vr_block *n, vr_block **min)
{
    if (!n->left) {
        *min = n;
        return n->right;
    }
    vr_block *old = n->left;
    int h = height(old);
    return settle(n, &n->left, old, h, remove_min(old, min));
}

static vr_block *remove_node(vr_block *n, vr_block *b, vra_order order, int *found)
{
    if (!n)
        return NULL;
    if (n == b) {
        *found = 1;
        if (!n->left)
            return n->right;
        if (!n->right)
            return n->left;
        vr_block *min = NULL;
        vr_block *r = remove_min(n->right, &min);
        min->left = n->left;
        min->right = r;
        return rebalance(min);
    }
    vr_block **side = cmp(order, b, n) < 0 ? &n->left : &n->right;
    vr_block *old = *side;
    int h = height(old);
    return settle(n, side, old, h, remove_node(old, b, order, found));
}

void vra_tree_remove(vra_tree *t, vr_block *b)
{
    int found = 0;
    t->root = remove_node(t->root, b, t->order, &found);
    if (found)
        t->count--;
    b->left = b->right = NULL;
    b->height = 0;
}

vr_block *vra_tree_lower_bound(const vra_tree *t, const vr_block *key)
{
    vr_block *n = t->root, *best = NULL;
    while (n) {
        if (cmp(t->order, n, key) >= 0) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

vr_block *vra_tree_next(const vra_tree *t, const vr_block *key)
{
    vr_block *n = t->root, *best = NULL;
    while (n) {
        if (cmp(t->order, n, key) > 0) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

vr_block *vra_tree_prev(const vra_tree *t, const vr_block *key)
{
    vr_block *n = t->root, *best = NULL;
    while (n) {
        if (cmp(t->order, n, key) < 0) {
            best = n;
            n = n->right;
        } else {
            n = n->left;
        }
    }
    return best;
}

vr_block *vra_tree_first(const vra_tree *t)
{
    vr_block *n = t->root;
    while (n && n->left)
        n = n->left;
    return n;
}

vr_block *vra_tree_last(const vra_tree *t)
{
    vr_block *n = t->root;
    while (n && n->right)
        n = n->right;
    return n;
}

static void walk(vr_block *n, void (*fn)(vr_block *, void *), void *ctx)
{
    if (!n)
        return;
    walk(n->left, fn, ctx);
    vr_block *r = n->right; /* fn may not modify the tree, but read it first anyway */
    fn(n, ctx);
    walk(r, fn, ctx);
}

void vra_tree_walk(const vra_tree *t, void (*fn)(vr_block *, void *), void *ctx)
{
    walk(t->root, fn, ctx);
}

/* Returns the height of subtree n, or -1 when it is not a valid AVL tree
 * whose keys lie strictly between lo and hi (NULL = unbounded). */
static int verify(const vra_tree *t, const vr_block *n, const vr_block *lo, const vr_block *hi, long *count)
{
    if (!n)
        return 0;
    if ((lo && cmp(t->order, n, lo) <= 0) || (hi && cmp(t->order, n, hi) >= 0))
        return -1;
    int hl = verify(t, n->left, lo, n, count);
    int hr = verify(t, n->right, n, hi, count);
    if (hl < 0 || hr < 0)
        return -1;
    int h = 1 + (hl > hr ? hl : hr);
    if (n->height != h || hl - hr > 1 || hr - hl > 1)
        return -1;
    (*count)++;
    return h;
}

long vra_tree_verify(const vra_tree *t)
{
    long count = 0;
    if (verify(t, t->root, NULL, NULL, &count) < 0 || (size_t)count != t->count)
        return -1;
    return count;
}
