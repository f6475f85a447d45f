/*
 * coll.c - collectives between the devices of a map.
 *
 * Every collective has the same shape:
 *   1. check the arguments on this device (an error fails the whole map);
 *   2. arrive: publish a descriptor of the call (kind, axes, dtype, shape,
 *      dims, pairs, data pointers) and wait until every member of the group
 *      has published its own call with the same number, then compare: any
 *      difference is a mismatch that every member detects alike;
 *   3. move data by reading the peers' buffers directly (one copy);
 *   4. depart: announce that this device is done reading, and wait until
 *      every member is, so no buffer changes while a peer still reads it.
 * Reductions fold the members in rank order, so results are bitwise equal
 * to a serial left fold whatever the thread timing.
 */
#include "coll/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void call_format(const shmap_mesh *mesh, const shmap__call *c,
                        char *buf, size_t n)
{
  char shape[200], axes[320];
  shmap__shape_format((shmap_dtype)c->dtype, c->rank, c->shape, shape,
                      sizeof shape);
  shmap__axes_format(mesh, c->axes, c->naxes, axes, sizeof axes);
  snprintf(buf, n, "%s(", shmap__kind_name(c->kind));
  shmap__cat(buf, n, "%s over %s", shape, axes);
  const char *t = c->tiled ? "tiled" : "untiled";
  switch (c->kind) {
  case SHMAP__PSUM_SCATTER:
    shmap__cat(buf, n, ", scatter_dimension=%d, %s", c->p1, t);
    break;
  case SHMAP__ALL_GATHER:
    shmap__cat(buf, n, ", axis=%d, %s", c->p1, t);
    break;
  case SHMAP__ALL_TO_ALL:
    shmap__cat(buf, n, ", split_axis=%d, concat_axis=%d, %s", c->p1, c->p2, t);
    break;
  case SHMAP__PPERMUTE:
    shmap__cat(buf, n, ", %d pair%s #%016llx", c->npairs,
               c->npairs == 1 ? "" : "s", (unsigned long long)c->pairs_hash);
    break;
  default:
    break;
  }
  shmap__cat(buf, n, ")");
}

static bool call_equal(const shmap__call *a, const shmap__call *b)
{
  return a->kind == b->kind && a->naxes == b->naxes &&
         memcmp(a->axes, b->axes, (size_t)a->naxes * sizeof a->axes[0]) == 0 &&
         a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0 &&
         a->p1 == b->p1 && a->p2 == b->p2 && a->tiled == b->tiled &&
         a->npairs == b->npairs && a->pairs_hash == b->pairs_hash;
}

typedef struct prep {
  const char *name;
  bool axes_ok;
  char op[360]; /* "psum over 'j'", formatted only for messages */
  shmap__call call;
  int n, rank;  /* group size and this device's rank */
  int out_dtype; /* dtype of a new result block (call.dtype but for psum
                    of bool, which gives i32) */
} prep;

/* The call's name for messages: "psum over ('i', 'j')". */
static const char *op_of(const shmap_ctx *ctx, prep *p)
{
  if (!p->op[0]) {
    char af[320];
    if (p->axes_ok)
      shmap__axes_format(ctx->rt->mesh, p->call.axes, p->call.naxes, af,
                         sizeof af);
    snprintf(p->op, sizeof p->op, "%s%s%s", p->name, p->axes_ok ? " over " : "",
             p->axes_ok ? af : "");
  }
  return p->op;
}

/* ---- arrive and depart ------------------------------------------------- */

/*
 * Two mechanisms keep each call O(1) per member, whatever the group size:
 *
 * Agreement.  Each member compares its call with its successor's (rank + 1
 * around the group).  If every member agrees with its successor, then by
 * induction around each ring every member of every group makes the same
 * call; if any two disagree, some member sees its successor disagree (or
 * leave its body, or pass the call with another group) and fails the map.
 *
 * Rendezvous.  The group's rank-0 member (its leader) keeps a slot per call
 * number (mod SHMAP__SLOTS).  One word holds the call number, a cancelled
 * bit and how many arrivals plus departures are still due (2n at first).
 * Arriving and cancelling are both compare-and-swaps on that word, so
 * either every member sees the arrivals complete or every member sees the
 * call cancelled: never a mix, which would leave someone waiting for a
 * departure that never comes.
 */
#define TAG(w) ((uint32_t)((w) >> 32))
#define CANCELED ((uint64_t)1 << 31)
#define LEFT(w) ((uint32_t)((w) & (CANCELED - 1)))
#define CLAIMING ((uint64_t)1) /* tag 0 (no call has number 0), left 1 */

typedef struct group {
  int n, rank;
  int base;           /* the rank-0 member's device number */
  const shmap_mesh *mesh;
  const int *axes;
  int naxes;
  int *members;       /* device numbers in rank order, once filled */
  bool filled;
  uint32_t k;         /* this call's number */
  shmap__dev *devs;
  shmap__bslot *slot; /* the leader's slot for this call */
  uint64_t gkey;      /* the group's axes, as the leader's slot records them */
  shmap__dev *succ;
  uint64_t t0;        /* when this device entered the call */
  uint64_t op;        /* packed kind and axes, for traces */
} group;

/* Device number of the member of rank r (O(number of axes)). */
static int member(const group *g, int r)
{
  if (g->filled)
    return g->members[r];
  int id = g->base;
  for (int k = g->naxes - 1; k >= 0; k--) {
    int a = g->axes[k];
    id += r % g->mesh->sizes[a] * g->mesh->strides[a];
    r /= g->mesh->sizes[a];
  }
  return id;
}

/* Before touching every member's data: list them all once. */
static void fill_members(group *g)
{
  if (!g->filled) {
    for (int r = 0; r < g->n; r++)
      g->members[r] = member(g, r);
    g->filled = true;
  }
}

/* The device is back in its body (after a call or a failed one). */
static int leave(shmap_ctx *ctx, const group *g, uint64_t bytes, int rc)
{
  shmap__dev *self = &ctx->rt->devs[ctx->dev];
  uint64_t t1 = shmap__set_state(self, SHMAP__ST_BODY, 0, shmap__now());
  if (shmap__tracing())
    shmap__trace_event(self, g->t0, t1, g->op, bytes, g->k);
  return rc;
}

static bool succ_arrived(void *arg)
{
  const group *g = arg;
  return atomic_load(&g->succ->arrive) >= g->k || atomic_load(&g->succ->finished);
}

static bool slot_changed(void *arg)
{
  const group *g = arg;
  uint64_t w = atomic_load(&g->slot->word);
  return w == 0 || TAG(w) == g->k;
}

static bool arrivals_done(void *arg)
{
  const group *g = arg;
  uint64_t w = atomic_load(&g->slot->word);
  return (w & CANCELED) || LEFT(w) <= (uint32_t)g->n;
}

static bool departures_done(void *arg)
{
  const group *g = arg;
  return TAG(atomic_load(&g->slot->word)) != g->k;
}

/* The call `mine` of this device as seen by member m: an error message in
 * `why` when they disagree. */
static bool member_agrees(const shmap_ctx *ctx, const group *g, int m,
                          const shmap__call *mine, char *why, size_t n)
{
  const shmap__dev *d = &g->devs[m];
  uint32_t a = atomic_load(&d->arrive);
  const shmap__call *theirs = &d->calls[g->k % SHMAP__HIST];
  if (a == g->k && call_equal(mine, theirs))
    return true;
  /* They disagree: only now is it worth describing both. */
  const shmap_mesh *mesh = ctx->rt->mesh;
  char me[96], other[96], cm[256], co[256];
  shmap__mesh_devname(mesh, ctx->dev, me, sizeof me);
  shmap__mesh_devname(mesh, m, other, sizeof other);
  call_format(mesh, mine, cm, sizeof cm);
  if (a < g->k)
    snprintf(why, n,
             "%s called %s as its collective call #%u, but %s returned from "
             "its body after %u collective call%s",
             me, cm, g->k, other, a, a == 1 ? "" : "s");
  else if (a - g->k >= SHMAP__HIST)
    snprintf(why, n,
             "%s called %s as its collective call #%u, but %s had already "
             "completed its call #%u with a different group of devices",
             me, cm, g->k, other, g->k);
  else {
    call_format(mesh, theirs, co, sizeof co);
    snprintf(why, n,
             "collective call #%u differs between devices: %s called %s but "
             "%s called %s",
             g->k, me, cm, other, co);
  }
  return false;
}

/* Wake every member that may wait on this group's slot. */
static void wake_members(shmap__runtime *rt, const group *g)
{
  if (rt->workers) {
    shmap__wake_all(rt);
    return;
  }
  for (int i = 0; i < g->n; i++)
    if (i != g->rank)
      shmap__dev_wake(&g->devs[member(g, i)]);
}

/* Join the leader's slot for call k.  0, or an error code. */
static int join(shmap_ctx *ctx, prep *p, group *g)
{
  shmap__runtime *rt = ctx->rt;
  shmap__dev *self = &rt->devs[ctx->dev];
  shmap__bslot *slot = g->slot;
  uint32_t n = (uint32_t)g->n;
  for (;;) {
    uint64_t w = atomic_load(&slot->word);
    if (TAG(w) == g->k) {
      if (w & CANCELED)
        return shmap__canceled(ctx, op_of(ctx, p));
      if (atomic_load(&slot->gkey) != g->gkey)
        return shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_EMISMATCH,
                               "collective call #%u differs between devices: "
                               "another group led by device %d makes the same "
                               "call over different axes",
                               g->k, g->base);
      if (atomic_compare_exchange_weak(&slot->word, &w, w - 1)) {
        if (LEFT(w) - 1 == n)
          wake_members(rt, g); /* the last arrival */
        return 0;
      }
    } else if (w == 0) {
      /* Claim the free slot, describe the group, then open it. */
      if (atomic_compare_exchange_weak(&slot->word, &w, CLAIMING)) {
        atomic_store(&slot->gkey, g->gkey);
        atomic_store(&slot->word, (uint64_t)g->k << 32 | (2 * n - 1));
        wake_members(rt, g);
        return 0;
      }
    } else if (w != CLAIMING) {
      /* An earlier call still holds the slot: wait for it to leave. */
      if (!shmap__dev_wait(rt, self, slot_changed, g, &rt->abort))
        return shmap__canceled(ctx, op_of(ctx, p));
    }
  }
}

static int arrive(shmap_ctx *ctx, prep *p, group *g)
{
  const shmap__call *call = &p->call;
  shmap__runtime *rt = ctx->rt;
  if (atomic_load(&rt->abort))
    return shmap__canceled(ctx, op_of(ctx, p));
  shmap__dev *self = &rt->devs[ctx->dev];
  /* The dtype rides in the top byte, for traces (shmap__trace_dtype). */
  g->op = shmap__pack_op(call->kind, call->axes, call->naxes) |
          (uint64_t)(call->dtype + 1) << 56;
  g->t0 = shmap__set_state(self, SHMAP__ST_COLL, g->op, shmap__now());
  g->devs = rt->devs;
  g->members = ctx->members;
  g->filled = false;
  g->mesh = rt->mesh;
  g->axes = call->axes;
  g->naxes = call->naxes;
  g->n = p->n; /* prepare() found the group's size and our rank */
  g->rank = p->rank;
  g->base = ctx->dev;
  for (int i = 0; i < call->naxes; i++) {
    int a = call->axes[i];
    g->base -= ctx->coords[a] * rt->mesh->strides[a];
  }
  g->k = ++ctx->seq;
  self->calls[g->k % SHMAP__HIST] = *call;
  atomic_store(&self->arrive, g->k);
  if (g->n == 1)
    return 0;
  /* The predecessor may be waiting to compare its call with ours. */
  shmap__dev_wake(&rt->devs[member(g, (g->rank + g->n - 1) % g->n)]);
  g->succ = &rt->devs[member(g, (g->rank + 1) % g->n)];
  if (!shmap__dev_wait(rt, self, succ_arrived, g, &rt->abort))
    return leave(ctx, g, 0, shmap__canceled(ctx, op_of(ctx, p)));
  char why[SHMAP__MSG_MAX - 200];
  if (!member_agrees(ctx, g, (int)(g->succ - rt->devs), call, why, sizeof why)) {
    /* A successor that left because the map already failed is a
     * consequence, not a second cause. */
    if (atomic_load(&rt->abort))
      return leave(ctx, g, 0, shmap__canceled(ctx, op_of(ctx, p)));
    return leave(ctx, g, 0, shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_EMISMATCH,
                                            "%s", why));
  }
  g->slot = &rt->devs[g->base].bslot[g->k % SHMAP__SLOTS];
  g->gkey = g->op >> 8 & (((uint64_t)1 << 36) - 1); /* the axes, their count */
  int rc = join(ctx, p, g);
  if (rc)
    return leave(ctx, g, 0, rc);
  for (;;) {
    if (shmap__dev_wait(rt, self, arrivals_done, g, &rt->abort)) {
      if (atomic_load(&g->slot->word) & CANCELED)
        return leave(ctx, g, 0, shmap__canceled(ctx, op_of(ctx, p)));
      return 0;
    }
    /* The map failed while we wait: cancel the call for all members,
     * unless the last arrival got there first. */
    uint64_t w = atomic_load(&g->slot->word);
    if (!(w & CANCELED) && LEFT(w) > (uint32_t)g->n &&
        !atomic_compare_exchange_strong(&g->slot->word, &w, w | CANCELED))
      continue;
    if (w & CANCELED || LEFT(w) > (uint32_t)g->n) {
      wake_members(rt, g);
      return leave(ctx, g, 0, shmap__canceled(ctx, op_of(ctx, p)));
    }
  }
}

/* No abort here: every member that got through arrive() moves data without
 * waiting for anything, so departures always come; leaving early would let
 * a buffer change while a peer still reads it. */
static void depart(shmap_ctx *ctx, group *g, uint64_t bytes)
{
  shmap__runtime *rt = ctx->rt;
  if (g->n > 1) {
    uint64_t w = atomic_fetch_sub(&g->slot->word, 1);
    if (LEFT(w) == 1) {
      atomic_store(&g->slot->word, 0); /* free the slot for a later call */
      wake_members(rt, g);
    } else {
      shmap__dev_wait(rt, &rt->devs[ctx->dev], departures_done, g, NULL);
    }
  }
  leave(ctx, g, bytes, 0);
}

/* Member r's call, with its data pointers.  Loops over every member call
 * fill_members() first. */
static const shmap__call *peer(const group *g, int r)
{
  return &g->devs[member(g, r)].calls[g->k % SHMAP__HIST];
}

/* ---- argument checks ---------------------------------------------------- */

/* Bodies name the same axes call after call: keep the last parse. */
static int axes_cached(shmap_ctx *ctx, const char *name, const char *text,
                       int axes[], int *naxes)
{
  shmap__dev *d = &ctx->rt->devs[ctx->dev];
  if (text && d->axes_text[0] && strcmp(text, d->axes_text) == 0) {
    memcpy(axes, d->axes_parsed, sizeof d->axes_parsed);
    *naxes = d->axes_n;
    return 0;
  }
  int rc = shmap__axes_parse(ctx->rt->mesh, name, text, axes, naxes);
  if (rc == 0 && strlen(text) < sizeof d->axes_text) {
    strcpy(d->axes_text, text);
    memcpy(d->axes_parsed, axes, sizeof d->axes_parsed);
    d->axes_n = *naxes;
  }
  return rc;
}

static int prepare(shmap_ctx *ctx, const char *name, int kind,
                   const shmap_block *x, const char *axes, prep *p)
{
  p->name = name;
  p->axes_ok = false;
  p->op[0] = '\0';
  int rc = shmap__ctx_check(ctx, name);
  if (rc)
    return rc;
  memset(&p->call, 0, sizeof p->call);
  p->call.kind = kind;
  if ((rc = axes_cached(ctx, name, axes, p->call.axes, &p->call.naxes)))
    return shmap__dev_fail(ctx, name, rc, "%s", shmap__errbuf());
  p->axes_ok = true;
  if (!shmap__block_valid(x))
    return shmap__block_check(ctx, op_of(ctx, p), "the input", x);
  p->call.dtype = x->dtype;
  p->out_dtype = x->dtype;
  p->call.rank = x->rank;
  memcpy(p->call.shape, x->shape, sizeof p->call.shape);
  p->call.src = x->data;
  p->n = shmap__group(ctx->rt->mesh, p->call.axes, p->call.naxes, ctx->dev,
                      NULL, &p->rank);
  return 0;
}

/* Normalise a possibly negative dimension into [0, limit). */
static int norm_dim(shmap_ctx *ctx, prep *p, const char *what, int dim,
                    int limit, int *out)
{
  int d = dim < 0 ? dim + limit : dim;
  if (d < 0 || d >= limit)
    return shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_EINVAL,
                           "%s %d is out of range [%d, %d) for a block of rank "
                           "%d",
                           what, dim, -limit, limit, p->call.rank);
  *out = d;
  return 0;
}

static int block_shape_msg(const prep *p, char *buf, size_t n)
{
  shmap__shape_format((shmap_dtype)p->call.dtype, p->call.rank, p->call.shape,
                      buf, n);
  return 0;
}

static int split_check(shmap_ctx *ctx, prep *p, const char *what, int d,
                       int tiled)
{
  int64_t size = p->call.shape[d];
  char s[128];
  block_shape_msg(p, s, sizeof s);
  if (tiled && size % p->n != 0)
    return shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_ESHAPE,
                           "%s %d of the %s block has size %lld, not divisible "
                           "by the group size %d",
                           what, d, s, (long long)size, p->n);
  if (!tiled && size != p->n)
    return shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_ESHAPE,
                           "untiled: %s %d of the %s block has size %lld but "
                           "must equal the group size %d",
                           what, d, s, (long long)size, p->n);
  return 0;
}

static shmap_block *result_block(shmap_ctx *ctx, prep *p, int rank,
                                 const int64_t shape[])
{
  shmap__chunk *c = shmap__arena_alloc(ctx, (shmap_dtype)p->out_dtype, rank,
                                       shape, SHMAP__CHUNK_SCRATCH, false);
  if (!c) {
    shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_ENOMEM, "%s", shmap__errbuf());
    return NULL;
  }
  return &c->block;
}

/* Shape-changing collectives: allocate the result, arrive, and list the
 * members (every member reads every peer).  The result is freed again if
 * the call fails. */
static int begin_new_block(shmap_ctx *ctx, prep *p, int rank,
                           const int64_t shape[], group *g, shmap_block **res)
{
  *res = result_block(ctx, p, rank, shape);
  if (!*res)
    return ctx->err;
  p->call.dst = (*res)->data;
  int rc = arrive(ctx, p, g);
  if (rc) {
    shmap__arena_free(ctx, shmap__arena_find(ctx, *res));
    return rc;
  }
  fill_members(g);
  return 0;
}

/* ---- queries -------------------------------------------------------------- */

static int group_query(shmap_ctx *ctx, const char *name, const char *axes,
                       int *rank)
{
  int rc = shmap__ctx_check(ctx, name);
  if (rc)
    return rc;
  int ax[SHMAP_MAX_AXES], nax;
  if ((rc = shmap__axes_parse(ctx->rt->mesh, name, axes, ax, &nax))) {
    return shmap__dev_fail(ctx, name, rc, "%s", shmap__errbuf());
  }
  return shmap__group(ctx->rt->mesh, ax, nax, ctx->dev, NULL, rank);
}

SHMAP_EXTERN int shmap_axis_index(shmap_ctx *ctx, const char *axes)
{
  int rank = 0;
  int rc = group_query(ctx, "axis_index", axes, &rank);
  return rc < 0 ? rc : rank;
}

SHMAP_EXTERN int shmap_axis_size(shmap_ctx *ctx, const char *axes)
{
  int rank;
  return group_query(ctx, "axis_size", axes, &rank);
}

/* ---- reductions in place -------------------------------------------------- */

/* Bytes of the stack buffer a member folds one piece of its chunk into. */
#define PIECE_BYTES 8192
/* Groups up to this size keep their source pointers on the stack. */
#define STACK_SRCS 64

int shmap__kind_redop(int kind)
{
  switch (kind) {
  case SHMAP__PMAX: return SHMAP__OP_MAX;
  case SHMAP__PMIN: return SHMAP__OP_MIN;
  case SHMAP__PMEAN: return SHMAP__OP_MEAN;
  default: return SHMAP__OP_SUM;
  }
}

/* The kernel of a reduction on the call's dtype, or an error saying why
 * the dtype does not allow it. */
static int reduction_kernel(shmap_ctx *ctx, prep *p, int kind,
                            shmap__fold_fn *fold)
{
  int op = shmap__kind_redop(kind);
  const shmap__dtype_info *t = shmap__dtype((shmap_dtype)p->call.dtype);
  if (t->not_allowed[op])
    return shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_EDTYPE, "%s on %s: %s",
                           p->name, t->name, t->not_allowed[op]);
  *fold = shmap__fold(op, (shmap_dtype)p->call.dtype);
  p->out_dtype = t->result[op];
  return 0;
}

/* Room for the group's source pointers (before arriving, so a failure
 * needs no departure). */
static const void **srcs_alloc(shmap_ctx *ctx, prep *p, const void **stack)
{
  if (p->n <= STACK_SRCS)
    return stack;
  const void **s = shmap__malloc(sizeof *s * (size_t)p->n);
  if (!s)
    shmap__dev_fail(ctx, op_of(ctx, p), SHMAP_ENOMEM, "out of memory");
  return s;
}

static void srcs_free(const void **srcs, const void **stack)
{
  if (srcs != stack)
    free((void *)srcs);
}

/*
 * Fused reduce-scatter + all-gather: member r folds chunk r of every
 * member's source in one pass (the kernel keeps partial results in
 * registers, in rank order) into a piece on its stack, and copies the
 * piece to every member's destination.  `count` divides (pmean) when
 * nonzero; destinations hold elements of `des` bytes (i32 for bool sums).
 */
static void reduce_all(group *g, shmap__fold_fn fold, const void **srcs,
                       size_t es, size_t des, size_t numel, int count)
{
  size_t big = es > des ? es : des;
  size_t align = 64 / big;
  size_t chunk = (numel + (size_t)g->n - 1) / (size_t)g->n;
  chunk = (chunk + align - 1) / align * align;
  size_t lo = chunk * (size_t)g->rank, hi = lo + chunk;
  if (hi > numel)
    hi = numel;
  if (lo >= hi)
    return;
  fill_members(g);
  _Alignas(64) unsigned char tmp[PIECE_BYTES];
  size_t piece = PIECE_BYTES / big;
  for (size_t off = lo; off < hi; off += piece) {
    size_t len = hi - off < piece ? hi - off : piece;
    for (int r = 0; r < g->n; r++)
      srcs[r] = (const char *)peer(g, r)->src + off * es;
    fold(tmp, srcs, g->n, len, count);
    for (int r = 0; r < g->n; r++)
      memcpy((char *)peer(g, r)->dst + off * des, tmp, len * des);
  }
}

static int reduce_inplace(shmap_ctx *ctx, shmap_block *x, const char *axes,
                          int kind, const char *name)
{
  prep p;
  int rc = prepare(ctx, name, kind, x, axes, &p);
  if (rc)
    return rc;
  shmap__fold_fn fold;
  if ((rc = reduction_kernel(ctx, &p, kind, &fold)))
    return rc;
  if (p.out_dtype != (int)x->dtype)
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_EDTYPE,
                           "%s of %s gives %s (as in JAX), which does not fit "
                           "in place: use shmap_%s_ex(), which returns a new "
                           "block",
                           name, shmap_dtype_name(x->dtype),
                           shmap_dtype_name((shmap_dtype)p.out_dtype), name);
  const void *stack[STACK_SRCS];
  const void **srcs = srcs_alloc(ctx, &p, stack);
  if (!srcs)
    return ctx->err;
  p.call.dst = x->data;
  group g;
  if ((rc = arrive(ctx, &p, &g))) {
    srcs_free(srcs, stack);
    return rc;
  }
  size_t es = shmap_dtype_size(x->dtype);
  reduce_all(&g, fold, srcs, es, es, (size_t)shmap_block_numel(x),
             kind == SHMAP__PMEAN ? g.n : 0);
  srcs_free(srcs, stack);
  depart(ctx, &g, shmap_block_nbytes(x));
  return 0;
}

SHMAP_EXTERN int shmap_psum(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return reduce_inplace(ctx, x, axes, SHMAP__PSUM, "psum");
}

SHMAP_EXTERN int shmap_pmax(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return reduce_inplace(ctx, x, axes, SHMAP__PMAX, "pmax");
}

SHMAP_EXTERN int shmap_pmin(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return reduce_inplace(ctx, x, axes, SHMAP__PMIN, "pmin");
}

SHMAP_EXTERN int shmap_pmean(shmap_ctx *ctx, shmap_block *x, const char *axes)
{
  return reduce_inplace(ctx, x, axes, SHMAP__PMEAN, "pmean");
}

/* ---- psum_scatter --------------------------------------------------------- */

SHMAP_EXTERN int shmap_psum_scatter(shmap_ctx *ctx, const shmap_block *x,
                                    const char *axes, int scatter_dimension,
                                    int tiled, shmap_block **out)
{
  if (out)
    *out = NULL;
  prep p;
  int rc = prepare(ctx, "psum_scatter", SHMAP__PSUM_SCATTER, x, axes, &p);
  if (rc)
    return rc;
  if (!out)
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_EINVAL, "out is NULL");
  *out = NULL;
  int d = 0;
  if ((rc = norm_dim(ctx, &p, "scatter_dimension", scatter_dimension, x->rank, &d)) ||
      (rc = split_check(ctx, &p, "scatter_dimension", d, tiled)))
    return rc;
  p.call.p1 = d;
  p.call.tiled = tiled != 0;
  shmap__fold_fn fold;
  if ((rc = reduction_kernel(ctx, &p, SHMAP__PSUM_SCATTER, &fold)))
    return rc;
  /* View the block as [outer, S, inner]; rank r keeps rows [r*m, (r+1)*m). */
  int64_t m = x->shape[d] / p.n;
  int64_t outer = shmap__numel(d, x->shape);
  int64_t inner = shmap__numel(x->rank - d - 1, x->shape + d + 1);
  int64_t oshape[SHMAP_MAX_RANK];
  int orank = 0;
  for (int i = 0; i < x->rank; i++) {
    if (i == d && !tiled)
      continue;
    oshape[orank++] = i == d ? m : x->shape[i];
  }
  const void *stack[STACK_SRCS];
  const void **srcs = srcs_alloc(ctx, &p, stack);
  if (!srcs)
    return ctx->err;
  shmap_block *res;
  group g;
  if ((rc = begin_new_block(ctx, &p, orank, oshape, &g, &res))) {
    srcs_free(srcs, stack);
    return rc;
  }
  /* One pass per run of this rank's rows, straight into the result. */
  size_t es = shmap_dtype_size(x->dtype);
  size_t des = shmap_dtype_size(res->dtype);
  size_t run = (size_t)(m * inner);
  for (int64_t o = 0; o < outer && run; o++) {
    size_t src_off = ((size_t)o * (size_t)x->shape[d] + (size_t)(g.rank * m)) *
                     (size_t)inner * es;
    for (int r = 0; r < g.n; r++)
      srcs[r] = (const char *)peer(&g, r)->src + src_off;
    fold((char *)res->data + (size_t)o * run * des, srcs, g.n, run, 0);
  }
  srcs_free(srcs, stack);
  depart(ctx, &g, shmap_block_nbytes(x));
  *out = res;
  return 0;
}

/* ---- all_gather ----------------------------------------------------------- */

SHMAP_EXTERN int shmap_all_gather(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, int axis, int tiled,
                                  shmap_block **out)
{
  if (out)
    *out = NULL;
  prep p;
  int rc = prepare(ctx, "all_gather", SHMAP__ALL_GATHER, x, axes, &p);
  if (rc)
    return rc;
  if (!out)
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_EINVAL, "out is NULL");
  *out = NULL;
  if (!tiled && x->rank == SHMAP_MAX_RANK)
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_ESHAPE,
                           "untiled all_gather would make a block of rank %d "
                           "(at most %d)", x->rank + 1, SHMAP_MAX_RANK);
  if (tiled && x->rank == 0)
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_ESHAPE,
                           "tiled all_gather needs a block of rank >= 1");
  int a = 0;
  if ((rc = norm_dim(ctx, &p, "axis", axis, tiled ? x->rank : x->rank + 1, &a)))
    return rc;
  p.call.p1 = a;
  p.call.tiled = tiled != 0;
  int64_t oshape[SHMAP_MAX_RANK];
  int orank = tiled ? x->rank : x->rank + 1;
  for (int i = 0, j = 0; i < orank; i++) {
    if (!tiled && i == a)
      oshape[i] = p.n;
    else
      oshape[i] = x->shape[j++] * (tiled && i == a ? p.n : 1);
  }
  shmap_block *res;
  group g;
  if ((rc = begin_new_block(ctx, &p, orank, oshape, &g, &res)))
    return rc;
  /* Member s's block lands at position s along `a` of the result. */
  size_t es = shmap_dtype_size(x->dtype);
  int64_t ostr[SHMAP_MAX_RANK], dstr[SHMAP_MAX_RANK], xstr[SHMAP_MAX_RANK];
  shmap__strides(orank, oshape, ostr);
  shmap__strides(x->rank, x->shape, xstr);
  for (int i = 0, j = 0; i < orank; i++)
    if (tiled || i != a)
      dstr[j++] = ostr[i];
  int64_t step = tiled ? x->shape[a] * ostr[a] : ostr[a];
  for (int s = 0; s < g.n; s++)
    shmap__copy_box((char *)res->data + (size_t)(s * step) * es, dstr,
                    peer(&g, s)->src, xstr, x->rank, x->shape, es);
  depart(ctx, &g, shmap_block_nbytes(x));
  *out = res;
  return 0;
}

/* ---- all_to_all ----------------------------------------------------------- */

SHMAP_EXTERN int shmap_all_to_all(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, int split_axis,
                                  int concat_axis, int tiled,
                                  shmap_block **out)
{
  if (out)
    *out = NULL;
  prep p;
  int rc = prepare(ctx, "all_to_all", SHMAP__ALL_TO_ALL, x, axes, &p);
  if (rc)
    return rc;
  if (!out)
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_EINVAL, "out is NULL");
  *out = NULL;
  int sa = 0, ca = 0;
  if ((rc = norm_dim(ctx, &p, "split_axis", split_axis, x->rank, &sa)) ||
      (rc = norm_dim(ctx, &p, "concat_axis", concat_axis, x->rank, &ca)) ||
      (rc = split_check(ctx, &p, "split_axis", sa, tiled)))
    return rc;
  p.call.p1 = sa;
  p.call.p2 = ca;
  p.call.tiled = tiled != 0;
  int rank = x->rank;
  /* The chunk each member sends to each other: tiled, the block with
   * dimension sa divided by n; untiled, the block without dimension sa. */
  int64_t cshape[SHMAP_MAX_RANK], xstr[SHMAP_MAX_RANK], sstr[SHMAP_MAX_RANK];
  shmap__strides(rank, x->shape, xstr);
  int crank = 0;
  for (int i = 0; i < rank; i++) {
    if (!tiled && i == sa)
      continue;
    cshape[crank] = i == sa ? x->shape[i] / p.n : x->shape[i];
    sstr[crank++] = xstr[i];
  }
  int64_t oshape[SHMAP_MAX_RANK], ostr[SHMAP_MAX_RANK], dstr[SHMAP_MAX_RANK];
  if (tiled) {
    memcpy(oshape, cshape, sizeof(int64_t) * (size_t)rank);
    oshape[ca] *= p.n;
  } else {
    for (int i = 0, j = 0; i < rank; i++)
      oshape[i] = i == ca ? p.n : cshape[j++];
  }
  shmap__strides(rank, oshape, ostr);
  for (int i = 0, j = 0; i < rank; i++)
    if (tiled || i != ca)
      dstr[j++] = ostr[i];
  shmap_block *res;
  group g;
  if ((rc = begin_new_block(ctx, &p, rank, oshape, &g, &res)))
    return rc;
  size_t es = shmap_dtype_size(x->dtype);
  int64_t src_step = (tiled ? x->shape[sa] / g.n : 1) * xstr[sa];
  int64_t dst_step = (tiled ? cshape[ca] : 1) * ostr[ca];
  for (int s = 0; s < g.n; s++)
    shmap__copy_box((char *)res->data + (size_t)(s * dst_step) * es, dstr,
                    (const char *)peer(&g, s)->src + (size_t)(g.rank * src_step) * es,
                    sstr, crank, cshape, es);
  depart(ctx, &g, shmap_block_nbytes(x));
  *out = res;
  return 0;
}

/* ---- ppermute ------------------------------------------------------------- */

SHMAP_EXTERN int shmap_ppermute(shmap_ctx *ctx, shmap_block *x,
                                const char *axes, int npairs,
                                const int pairs[][2])
{
  prep p;
  int rc = prepare(ctx, "ppermute", SHMAP__PPERMUTE, x, axes, &p);
  if (rc)
    return rc;
  if (npairs < 0 || (npairs > 0 && !pairs))
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_EINVAL,
                           npairs < 0 ? "npairs is negative (%d)"
                                      : "pairs is NULL but npairs is %d",
                           npairs);
  /* from[dst] = src: checks uniqueness and gives an order-free hash. */
  int *from = shmap__malloc(sizeof(int) * (size_t)p.n);
  if (!from)
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_ENOMEM, "out of memory");
  for (int i = 0; i < p.n; i++)
    from[i] = -1;
  for (int i = 0; i < npairs; i++) {
    int s = pairs[i][0], t = pairs[i][1];
    const char *bad = NULL;
    if (s < 0 || s >= p.n || t < 0 || t >= p.n)
      bad = "has a rank outside [0, group size)";
    else if (from[t] >= 0)
      bad = "repeats a destination";
    else
      for (int j = 0; j < i && !bad; j++)
        if (pairs[j][0] == s)
          bad = "repeats a source";
    if (bad) {
      free(from);
      return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_EINVAL,
                             "pair %d (%d, %d) %s (group size %d)", i, s, t,
                             bad, p.n);
    }
    from[t] = s;
  }
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < p.n; i++) {
    h ^= (uint64_t)(uint32_t)from[i];
    h *= 1099511628211ull;
  }
  p.call.npairs = npairs;
  p.call.pairs_hash = h;
  size_t bytes = shmap_block_nbytes(x);
  int src = from[p.rank];
  free(from);
  /* The incoming block waits in a scratch block of the device's arena
   * (reused from call to call) until every member has read its source. */
  shmap__chunk *tmp = NULL;
  if (src >= 0 && bytes &&
      !(tmp = shmap__arena_alloc(ctx, x->dtype, x->rank, x->shape,
                                 SHMAP__CHUNK_SCRATCH, false)))
    return shmap__dev_fail(ctx, op_of(ctx, &p), SHMAP_ENOMEM, "%s",
                           shmap__errbuf());
  p.call.dst = x->data;
  group g;
  if ((rc = arrive(ctx, &p, &g))) {
    if (tmp)
      shmap__arena_free(ctx, tmp);
    return rc;
  }
  if (tmp)
    memcpy(tmp->block.data, peer(&g, src)->src, bytes);
  depart(ctx, &g, bytes);
  /* Every member has read what it needs: now overwrite in place. */
  if (tmp) {
    memcpy(x->data, tmp->block.data, bytes);
    shmap__arena_free(ctx, tmp);
  } else if (bytes) {
    memset(x->data, 0, bytes);
  }
  return 0;
}
