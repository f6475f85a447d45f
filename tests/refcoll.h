/* SPDX-License-Identifier: MIT */
/*
 * refcoll.h - a serial reference model of libshmap's collectives, written
 * from SEMANTICS.md section 6 independently of the library, plus the few
 * helpers the collective test suites share (blocks on the host, a seeded
 * random generator, per-device capture of results).
 *
 * The model sees every device's block at once: each collective takes the
 * input block of every device of the mesh (in[dev]) and produces every
 * device's result (out[dev]).  A device's group is the devices that share
 * its coordinates on the axes not named; its rank is row-major over the
 * named axes, first name major.  Reductions are left folds in rank order.
 *
 * Only the public header is used, for the dtype enum and shmap_block.
 */
#ifndef REFCOLL_H
#define REFCOLL_H

#include <shmap.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REF_NAME_MAX 32

/* ---- mesh and groups --------------------------------------------------- */

typedef struct ref_mesh {
  int naxes;
  char names[SHMAP_MAX_AXES][REF_NAME_MAX];
  int sizes[SHMAP_MAX_AXES];
  int ndev;
} ref_mesh;

/* Fill a model mesh; returns 0, or -1 for an invalid description. */
int ref_mesh_init(ref_mesh *m, int naxes, const char *const names[],
                  const int sizes[]);
/* "i=4, j=2" for shmap_mesh_create(). */
void ref_mesh_text(const ref_mesh *m, char *buf, size_t n);
/* Coordinates of a device (row-major numbering, first axis major). */
void ref_coords(const ref_mesh *m, int dev, int coords[]);
int ref_device(const ref_mesh *m, const int coords[]);
/* Number of the axis called `name`, or -1. */
int ref_axis(const ref_mesh *m, const char *name);

/* Group of `dev` over the ordered axes: returns its size n, stores the
 * members' device numbers in rank order (members may be NULL) and the rank
 * of `dev` (rank may be NULL). */
int ref_group(const ref_mesh *m, const int axes[], int naxes, int dev,
              int members[], int *rank);
int ref_axis_index(const ref_mesh *m, const int axes[], int naxes, int dev);
int ref_axis_size(const ref_mesh *m, const int axes[], int naxes);

/* Text of an axes argument.  style 0: "i,j"; 1: "('i','j')";
 * 2: "('i', 'j')"; 3: "i, j".  One axis is always written "i". */
void ref_axes_text(const ref_mesh *m, const int axes[], int naxes, int style,
                   char *buf, size_t n);

/* ---- blocks on the host ------------------------------------------------ */

size_t ref_esize(shmap_dtype dt);
const char *ref_dtname(shmap_dtype dt);
/* 'f' float, 's' signed, 'u' unsigned, 'b' bool, 'c' complex. */
char ref_dtclass(shmap_dtype dt);
/* The model knows ref_ndtypes() dtypes: ref_dtype_at(0 .. n-1). */
int ref_ndtypes(void);
shmap_dtype ref_dtype_at(int k);
/* bf16 and f16 from their definitions (round half to even; NaN quiet,
 * upper payload bits kept). */
float ref_bf16_to_f32(uint16_t h);
float ref_f16_to_f32(uint16_t h);
uint16_t ref_f32_to_bf16(float f);
uint16_t ref_f32_to_f16(float f);
int64_t ref_numel(int rank, const int64_t shape[]);
/* New block, zeroed, data from malloc (never NULL data, even when empty). */
shmap_block *ref_block_new(shmap_dtype dt, int rank, const int64_t shape[]);
shmap_block *ref_block_copy(const shmap_block *b);
void ref_block_free(shmap_block *b);
void ref_blocks_free(shmap_block **bs, int n);
/* Element access through double (exact for the values the tests use). */
double ref_get(const shmap_block *b, int64_t i);
void ref_set(shmap_block *b, int64_t i, double v);
/* Same dtype, rank, shape and bytes. */
bool ref_block_same(const shmap_block *got, const shmap_block *want);
/* Describe the first difference (shape or element) into buf. */
void ref_block_diff(const shmap_block *got, const shmap_block *want,
                    char *buf, size_t n);
/* "f32[2,3]" */
void ref_shape_text(shmap_dtype dt, int rank, const int64_t shape[],
                    char *buf, size_t n);
/* "f32[2,3] {1, 2, ...}" (at most `maxel` elements). */
void ref_block_text(const shmap_block *b, int maxel, char *buf, size_t n);

/* ---- the collectives --------------------------------------------------- */

/*
 * Each takes in[dev] for every device of the mesh (blocks equal in dtype
 * and shape within each group) and stores a new block in out[dev] for every
 * device.  They return 0, or the error code the rules of section 6 give
 * for invalid arguments (nothing is stored then):
 *   SHMAP_EDTYPE  pmean on an integer or bool dtype, pmax or pmin on a
 *                 complex one;
 *   SHMAP_EINVAL  a dimension out of range, bad ppermute pairs;
 *   SHMAP_ESHAPE  a size that does not divide or equal the group size.
 */
typedef enum ref_redop { REF_SUM, REF_MAX, REF_MIN, REF_MEAN } ref_redop;

/* The result dtype of a reduction (psum of bool is i32), and 0 or the
 * error code when the dtype does not allow it (pmean of integers and
 * bool, pmax and pmin of complex). */
shmap_dtype ref_reduce_dtype(ref_redop op, shmap_dtype dt);
int ref_reduce_allowed(ref_redop op, shmap_dtype dt);
int ref_reduce(const ref_mesh *m, const int axes[], int naxes, ref_redop op,
               shmap_block *const in[], shmap_block *out[]);
int ref_psum_scatter(const ref_mesh *m, const int axes[], int naxes,
                     shmap_block *const in[], int dim, int tiled,
                     shmap_block *out[]);
/* Negative dimensions count from the end, as in Python: for all_gather
 * from the end of the result (rank + 1 when untiled, rank when tiled), for
 * psum_scatter and all_to_all from the end of x. */
int ref_all_gather(const ref_mesh *m, const int axes[], int naxes,
                   shmap_block *const in[], int axis, int tiled,
                   shmap_block *out[]);
int ref_all_to_all(const ref_mesh *m, const int axes[], int naxes,
                   shmap_block *const in[], int split, int concat, int tiled,
                   shmap_block *out[]);
int ref_ppermute(const ref_mesh *m, const int axes[], int naxes,
                 shmap_block *const in[], int npairs, const int pairs[][2],
                 shmap_block *out[]);
/* Every member gets the block of rank `source`; SHMAP_EINVAL when source
 * is not a rank. */
int ref_pbroadcast(const ref_mesh *m, const int axes[], int naxes,
                   shmap_block *const in[], int source, shmap_block *out[]);
/* axis_index_groups for the reductions, psum_scatter, all_gather and
 * all_to_all above (JAX's meaning: each group of `gsize` ranks of the
 * axes, listed group after group in `ranks`, is a collective of its own,
 * ranked by its list).  NULL ranks: none.  Model state (single thread). */
void ref_set_groups(int ngroups, int gsize, const int *ranks);

/* ---- per-device capture of what bodies saw ---------------------------- */

#define REF_MSG_MAX 512

typedef struct ref_cap {
  int ndev;
  shmap_block **blk;       /* a copy of each device's result, or NULL */
  int *rc;                 /* a return code per device */
  int *val;                /* an integer per device */
  char (*msg)[REF_MSG_MAX]; /* a message per device */
} ref_cap;

ref_cap *ref_cap_new(int ndev);
void ref_cap_free(ref_cap *c);
/* Store a copy of b (NULL stores NULL) as device dev's result. */
void ref_cap_put(ref_cap *c, int dev, const shmap_block *b);
/* Store rc and shmap_errmsg() of the calling thread. */
void ref_cap_rc(ref_cap *c, int dev, int rc);

/* ---- one collective as data, for the model and for the library ---------- */

typedef enum ref_kind {
  RK_PSUM,
  RK_PMAX,
  RK_PMIN,
  RK_PMEAN,
  RK_PSUM_SCATTER,
  RK_ALL_GATHER,
  RK_ALL_TO_ALL,
  RK_PPERMUTE,
  RK_NKINDS,     /* the kinds above; those below have suites of their own */
  RK_PBROADCAST  /* dim: the source */
} ref_kind;

typedef struct ref_op {
  ref_kind kind;
  int naxes;
  int axes[SHMAP_MAX_AXES];
  char text[128];     /* the axes argument as passed to the library */
  int dim, dim2;      /* scatter_dimension / axis / split_axis, concat_axis */
  int tiled;
  int npairs;
  int (*pairs)[2];    /* owned by whoever built the op */
  int outplace;       /* reductions, ppermute: the _new form */
  int ngroups, gsize; /* axis_index_groups (the _groups forms) */
  int *groups;        /* NULL: none; owned by whoever built the op */
} ref_op;

const char *ref_kind_name(ref_kind k);
/* Fill op->axes from names and op->text in the given style. */
void ref_op_axes(const ref_mesh *m, ref_op *op, const int axes[], int naxes,
                 int style);
/* "psum_scatter(('i','j'), dim=1, tiled)" */
void ref_op_text(const ref_op *op, char *buf, size_t n);
/* The model of one op (see the ref_* functions above). */
int ref_apply(const ref_mesh *m, const ref_op *op, shmap_block *const in[],
              shmap_block *out[]);
/* The library's collective for one op, inside a body.  In-place kinds
 * work on x and set *res = x; the others store their new block in *res. */
int ref_call(shmap_ctx *ctx, const ref_op *op, shmap_block *x,
             shmap_block **res);
bool ref_kind_inplace(ref_kind k);

/*
 * A job: every device copies its input in[dev] into a block (from
 * shmap_block_alloc() when mem == 0, from its own malloc'd memory when
 * mem == 1), applies ops[0..nops) in order (each result feeding the next),
 * and leaves a copy of its final block in cap->blk[dev] and the first
 * failing call's code and message in cap->rc/msg.  Intermediate results of
 * shape-changing ops are freed with shmap_block_free() when free_early.
 * Runs with no inputs and no outputs, so only the collectives are tested.
 */
typedef struct ref_job {
  const ref_mesh *m;
  int nops;
  const ref_op *ops;
  shmap_block **in;
  ref_cap *cap;
  int mem;
  int free_early;
} ref_job;

int ref_job_body(shmap_ctx *ctx, void *arg);
/* Run the job on `mesh`; returns shmap_map()'s code. */
int ref_job_run(shmap_mesh *mesh, ref_job *job);
/* Model of the job: out[dev] for every device, or an error code. */
int ref_job_model(const ref_job *job, shmap_block *out[]);

/* ---- specs: split a global array, assemble blocks ------------------------ */

/* Per dimension, the mesh axes its entry names (0 = unsplit). */
typedef struct ref_spec {
  int ndims;
  int naxes[SHMAP_MAX_RANK];
  int axes[SHMAP_MAX_RANK][SHMAP_MAX_AXES];
} ref_spec;

/* The block of device `dev` of a global array. */
shmap_block *ref_split(const ref_mesh *m, const ref_spec *s,
                       const shmap_block *global, int dev);
/* The global array from every device's block (axes the spec does not name
 * take the block at coordinate 0). */
shmap_block *ref_assemble(const ref_mesh *m, const ref_spec *s,
                          shmap_block *const blocks[]);

/* ---- random numbers (splitmix64) ------------------------------------------ */

typedef struct ref_rng {
  uint64_t s;
} ref_rng;

uint64_t ref_rng_next(ref_rng *r);
/* Uniform in [lo, hi]. */
int ref_rng_int(ref_rng *r, int lo, int hi);
/* Values whose sums depend on the order: nonzero, random sign, magnitudes
 * 2^-20 .. 2^20 for floats; small integers (sums never overflow) for ints. */
void ref_fill_random(ref_rng *r, shmap_block *b);
/* Seed from SHMAPTEST_PROP_SEED when set, else `dflt`. */
uint64_t ref_seed(uint64_t dflt);

/* True when `hay` contains `needle`. */
bool ref_has(const char *hay, const char *needle);

#endif /* REFCOLL_H */
