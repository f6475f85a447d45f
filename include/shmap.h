/* SPDX-License-Identifier: MIT */
/*
 * shmap.h - per-device (SPMD) programming over a named device mesh, in the
 * style of JAX's shard_map, with simulated devices that share memory.
 *
 * Every function returning int returns a negative SHMAP_E* code on failure
 * and 0 (or, for queries, the non-negative value asked for) on success;
 * shmap_errmsg() then gives a detailed message for the calling thread.
 * Each function's full contract is in its man page.
 */
#ifndef SHMAP_H
#define SHMAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SHMAP_BUILDING) && defined(__GNUC__)
#define SHMAP_EXTERN __attribute__((visibility("default")))
#else
#define SHMAP_EXTERN
#endif

#if defined(__GNUC__)
#define SHMAP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SHMAP_PRINTF(a, b)
#endif

/* SHMAP_VERSION_MAJOR, _MINOR, _PATCH, _HEX and _STRING (generated). */
#include "shmap_version.h"

/* Largest array rank and largest number of mesh axes. */
#define SHMAP_MAX_RANK 8
#define SHMAP_MAX_AXES 8
/* Largest number of devices in one mesh. */
#define SHMAP_MAX_DEVICES 4096

/* ---- errors ------------------------------------------------------------ */

/*
 * The error codes, each once: X(name, value, text), where SHMAP_<name> is
 * the code, value its number and text what shmap_strerror() returns for it.
 * The enum below, shmap_strerror() and shmap_err_name() are made from this
 * table; a program can expand it with a macro of its own.
 */
#define SHMAP_ERRNO_MAP(X)                                                   \
  /* success */                                                              \
  X(OK, 0, "success")                                                        \
  /* invalid argument (NULL, out of range, ...) */                           \
  X(EINVAL, -1, "invalid argument")                                          \
  /* out of memory */                                                        \
  X(ENOMEM, -2, "out of memory")                                             \
  /* mesh or spec text does not parse */                                     \
  X(ESYNTAX, -3, "syntax error")                                             \
  /* unknown, duplicate or misplaced axis name */                            \
  X(EAXIS, -4, "bad axis name")                                              \
  /* rank, divisibility or shape rule broken */                              \
  X(ESHAPE, -5, "bad shape")                                                 \
  /* dtype not allowed here */                                               \
  X(EDTYPE, -6, "bad dtype")                                                 \
  /* a body returned an error */                                             \
  X(EBODY, -7, "body failed")                                                \
  /* devices disagree (outputs or collective calls) */                       \
  X(EMISMATCH, -8, "devices disagree")                                       \
  /* untiled output differs along an unnamed axis */                         \
  X(EREPLICATION, -9, "output not replicated")                               \
  /* released because another device failed */                               \
  X(ECANCELED, -10, "canceled because another device failed")                \
  /* call not allowed here (outside a body, ...) */                          \
  X(ESTATE, -11, "not allowed in this state")                                \
  /* operating system refused (threads, ...) */                              \
  X(ESYS, -12, "system error")

#define SHMAP__ERRNO_ENUM(name, value, text) SHMAP_##name = (value),
enum { SHMAP_ERRNO_MAP(SHMAP__ERRNO_ENUM) };
#undef SHMAP__ERRNO_ENUM

/* Short constant description of an error code ("invalid argument"), or
 * "unknown error code". */
SHMAP_EXTERN const char *shmap_strerror(int code);
/* Name of an error code ("SHMAP_EINVAL"), or "SHMAP_UNKNOWN". */
SHMAP_EXTERN const char *shmap_err_name(int code);
/* Detailed message for the last error of the calling thread, or "". */
SHMAP_EXTERN const char *shmap_errmsg(void);

/* The version of the library the program runs with: SHMAP_VERSION_HEX
 * and SHMAP_VERSION_STRING as the library was built ("0.1.0"). */
SHMAP_EXTERN unsigned shmap_version(void);
SHMAP_EXTERN const char *shmap_version_string(void);

/* ---- dtypes ------------------------------------------------------------ */

/* Values never change: new dtypes are appended.  bf16 and f16 are stored
 * as their 16-bit patterns (uint16_t), bool as one byte (0 false, anything
 * else true), c64 and c128 as {real, imaginary} pairs of f32 and f64. */
typedef enum shmap_dtype {
  SHMAP_F32 = 0,
  SHMAP_F64 = 1,
  SHMAP_I32 = 2,
  SHMAP_I64 = 3,
  SHMAP_BF16 = 4,
  SHMAP_F16 = 5,
  SHMAP_I8 = 6,
  SHMAP_U8 = 7,
  SHMAP_I16 = 8,
  SHMAP_U16 = 9,
  SHMAP_U32 = 10,
  SHMAP_U64 = 11,
  SHMAP_BOOL = 12,
  SHMAP_C64 = 13,
  SHMAP_C128 = 14
} shmap_dtype;
/* Number of dtypes: every value in [0, SHMAP_NDTYPES) is valid. */
#define SHMAP_NDTYPES 15

/* Kinds of dtype, from shmap_dtype_class(). */
enum {
  SHMAP_CLASS_FLOAT = 0,  /* f32 f64 bf16 f16 */
  SHMAP_CLASS_SIGNED = 1, /* i8 i16 i32 i64 */
  SHMAP_CLASS_UNSIGNED = 2, /* u8 u16 u32 u64 */
  SHMAP_CLASS_BOOL = 3,
  SHMAP_CLASS_COMPLEX = 4 /* c64 c128 */
};

/* Size of one element in bytes, or 0 for an invalid dtype. */
SHMAP_EXTERN size_t shmap_dtype_size(shmap_dtype dtype);
/* "f32", "bf16", "u8", "bool", "c64", ..., or "invalid". */
SHMAP_EXTERN const char *shmap_dtype_name(shmap_dtype dtype);
/* SHMAP_CLASS_*, or SHMAP_EDTYPE for an invalid dtype. */
SHMAP_EXTERN int shmap_dtype_class(shmap_dtype dtype);
/* Conversions between f32 and the 16-bit float formats.  To bf16 and f16
 * round to nearest, ties to even; NaN stays a (quiet) NaN. */
SHMAP_EXTERN uint16_t shmap_f32_to_bf16(float value);
SHMAP_EXTERN float shmap_bf16_to_f32(uint16_t bits);
SHMAP_EXTERN uint16_t shmap_f32_to_f16(float value);
SHMAP_EXTERN float shmap_f16_to_f32(uint16_t bits);

/* ---- mesh -------------------------------------------------------------- */

typedef struct shmap_mesh shmap_mesh;

/* Create a mesh from text such as "i=4, j=2".  Axis names are identifiers. */
SHMAP_EXTERN int shmap_mesh_create(shmap_mesh **mesh, const char *text);
/* Create a mesh from arrays of axis names and sizes. */
SHMAP_EXTERN int shmap_mesh_create_axes(shmap_mesh **mesh, int naxes,
                                        const char *const names[],
                                        const int sizes[]);
/* Give up the handle: the threads stop and the mesh is freed once its
 * arrays are gone.  NULL is ignored.  SHMAP_ESTATE inside a body of a map
 * on this mesh (nothing is freed then). */
SHMAP_EXTERN int shmap_mesh_destroy(shmap_mesh *mesh);

SHMAP_EXTERN int shmap_mesh_naxes(const shmap_mesh *mesh);
SHMAP_EXTERN int shmap_mesh_ndevices(const shmap_mesh *mesh);
/* Name of axis number `axis`, or NULL when out of range. */
SHMAP_EXTERN const char *shmap_mesh_axis_name(const shmap_mesh *mesh, int axis);
/* Size of axis number `axis`, or SHMAP_EINVAL when out of range. */
SHMAP_EXTERN int shmap_mesh_axis_size(const shmap_mesh *mesh, int axis);
/* Number of the axis called `name`, or SHMAP_EAXIS. */
SHMAP_EXTERN int shmap_mesh_axis_find(const shmap_mesh *mesh,
                                      const char *name);
/* Coordinates of a device (one per axis, row-major numbering). */
SHMAP_EXTERN int shmap_mesh_device_coords(const shmap_mesh *mesh, int device,
                                          int coords[]);
/* Device number of the given coordinates, or a negative error. */
SHMAP_EXTERN int shmap_mesh_device_id(const shmap_mesh *mesh,
                                      const int coords[]);

/* ---- partition specs --------------------------------------------------- */

/*
 * Specs are text: JAX's form as written, P('i', ('j','k'), None), or the
 * short form i, (j,k), None.  "" and "P()" mean fully unsplit.
 * Check a spec against a mesh and an array rank (and, when shape is not
 * NULL, the divisibility of each dimension).
 */
SHMAP_EXTERN int shmap_spec_check(const shmap_mesh *mesh, const char *spec,
                                  int rank, const int64_t shape[]);

/* ---- global arrays ----------------------------------------------------- */

typedef struct shmap_array shmap_array;

/* Copy `data` (row-major, `shape`, `dtype`) into a new host array: one
 * contiguous copy, split into blocks by each map that reads it. */
SHMAP_EXTERN int shmap_array_from_host(shmap_array **array, shmap_dtype dtype,
                                       int rank, const int64_t shape[],
                                       const void *data);
/* Copy the whole array to `data` (row-major). */
SHMAP_EXTERN int shmap_array_to_host(const shmap_array *array, void *data);
SHMAP_EXTERN void shmap_array_destroy(shmap_array *array);
SHMAP_EXTERN shmap_dtype shmap_array_dtype(const shmap_array *array);
SHMAP_EXTERN int shmap_array_rank(const shmap_array *array);
/* Pointer to `rank` dimension sizes, valid while the array lives. */
SHMAP_EXTERN const int64_t *shmap_array_shape(const shmap_array *array);
/* Number of elements. */
SHMAP_EXTERN int64_t shmap_array_numel(const shmap_array *array);

/* ---- blocks ------------------------------------------------------------ */

/*
 * A block is one device's local piece of an array.  The library hands out
 * blocks it owns; a body may also describe memory of its own with a block
 * (e.g. a stack buffer) and pass it to a collective.
 */
typedef struct shmap_block {
  void *data;
  shmap_dtype dtype;
  int rank;
  int64_t shape[SHMAP_MAX_RANK];
} shmap_block;

SHMAP_EXTERN int64_t shmap_block_numel(const shmap_block *block);
SHMAP_EXTERN size_t shmap_block_nbytes(const shmap_block *block);

/* ---- sharded arrays on a mesh ------------------------------------------ */

/*
 * An array made by a map (its outputs), by the functions below, or by
 * shmap_array_reshard() lives on a mesh: each device keeps its own block,
 * laid out by a spec (devices along axes the spec leaves out hold equal
 * copies), and the blocks stay there between maps.  Passing such an array
 * to a map whose in_spec equals its spec hands each body the very same
 * block memory (read-only, no copy); another in_spec reshards on the way
 * in.  An array keeps its mesh alive until the array is destroyed.
 */

/* Import host data (row-major) straight into the given sharding. */
SHMAP_EXTERN int shmap_array_from_host_sharded(shmap_array **array,
                                               shmap_mesh *mesh,
                                               const char *spec,
                                               shmap_dtype dtype, int rank,
                                               const int64_t shape[],
                                               const void *data);
/* Arrays created on the devices, with no host copy of the whole. */
SHMAP_EXTERN int shmap_array_zeros(shmap_array **array, shmap_mesh *mesh,
                                   const char *spec, shmap_dtype dtype,
                                   int rank, const int64_t shape[]);
/* Every element equal to *value (one element of the dtype). */
SHMAP_EXTERN int shmap_array_fill(shmap_array **array, shmap_mesh *mesh,
                                  const char *spec, shmap_dtype dtype,
                                  int rank, const int64_t shape[],
                                  const void *value);
/* Fills one device's block: `offset` is the block's position in the global
 * array (elements, per dimension).  Runs on the device's thread; returns 0
 * or an error. Devices holding copies of one block must fill them alike. */
typedef int (*shmap_init_fn)(shmap_block *block, int device,
                             const int coords[], const int64_t offset[],
                             void *arg);
SHMAP_EXTERN int shmap_array_init(shmap_array **array, shmap_mesh *mesh,
                                  const char *spec, shmap_dtype dtype,
                                  int rank, const int64_t shape[],
                                  shmap_init_fn init, void *arg);
/* A new sharded array with the same values laid out by `spec` on the same
 * mesh, moving the fewest bytes between devices. */
SHMAP_EXTERN int shmap_array_reshard(shmap_array **out,
                                     const shmap_array *array,
                                     const char *spec);
/* The mesh of a sharded array, or NULL for a host array. */
SHMAP_EXTERN shmap_mesh *shmap_array_mesh(const shmap_array *array);
/* The array's spec in canonical JAX form, e.g. "P('i', None)"; host
 * arrays have none (SHMAP_EINVAL).  Returns the length, like snprintf. */
SHMAP_EXTERN int shmap_array_spec(const shmap_array *array, char *buf,
                                  size_t len);
/* A view of device `device`'s block (data points into the array; do not
 * write it while a map may read it) and its offset in the global array. */
SHMAP_EXTERN int shmap_array_block(const shmap_array *array, int device,
                                   shmap_block *block, int64_t offset[]);
/* Print which devices hold which block, as a text grid (rank 1 or 2). */
SHMAP_EXTERN int shmap_array_visualize(const shmap_array *array, FILE *out);
/* The same picture as an SVG document: a grid of blocks per array, each
 * block coloured by the devices holding it and labelled with them and its
 * index ranges; several arrays stack top to bottom (a collective's before
 * and after), each under its caption (captions may be NULL).  With
 * SHMAP_SVG_VALUES each block also shows its values. */
#define SHMAP_SVG_VALUES 1u
SHMAP_EXTERN int shmap_array_visualize_svg(const shmap_array *const arrays[],
                                           const char *const captions[],
                                           int n, unsigned flags, FILE *out);

/* Data movement counted per mesh since creation or the last reset. */
typedef struct shmap_stats {
  uint64_t maps;            /* map calls that ran */
  uint64_t blocks_shared;   /* input blocks handed to a body without a copy */
  uint64_t blocks_built;    /* input or resharded blocks built by copying */
  uint64_t bytes_host;      /* bytes copied between host memory and blocks */
  uint64_t bytes_local;     /* bytes a device copied from its own blocks */
  uint64_t bytes_moved;     /* bytes a device copied from another's blocks */
  uint64_t bytes_transferred; /* bytes copied in from another mesh's blocks */
  uint64_t bytes_remote;    /* bytes this process received from others (MPI) */
  /* Room for counters of later versions (README.md, "ABI policy"): new
   * counters go before it; the library sets it to zero. */
  uint64_t reserved[8];
} shmap_stats;
SHMAP_EXTERN int shmap_mesh_stats(const shmap_mesh *mesh, shmap_stats *stats);
SHMAP_EXTERN void shmap_mesh_stats_reset(shmap_mesh *mesh);

/* ---- the map ----------------------------------------------------------- */

typedef struct shmap_ctx shmap_ctx;
/* A body runs once per device; 0 means success, anything else failure. */
typedef int (*shmap_body_fn)(shmap_ctx *ctx, void *arg);

/* Flags for shmap_map_flags(). */
#define SHMAP_NO_CHECK_REP 0x1u /* skip the replication check of outputs */

/*
 * Run `body` once per device of `mesh`, eagerly and concurrently.  Input k
 * is split by in_specs[k]; each device declares its output blocks with
 * shmap_out(), and output k is assembled by out_specs[k] into a new array
 * stored in out[k] (the caller destroys it).  On failure every out[k] is
 * NULL.
 */
SHMAP_EXTERN int shmap_map(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                           int nin, shmap_array *const in[],
                           const char *const in_specs[], int nout,
                           shmap_array *out[], const char *const out_specs[]);
SHMAP_EXTERN int shmap_map_flags(shmap_mesh *mesh, shmap_body_fn body,
                                 void *arg, int nin, shmap_array *const in[],
                                 const char *const in_specs[], int nout,
                                 shmap_array *out[],
                                 const char *const out_specs[],
                                 unsigned flags);

/* ---- inside a body ----------------------------------------------------- */

/* Device number, and the mesh the map runs on. */
SHMAP_EXTERN int shmap_ctx_device(const shmap_ctx *ctx);
SHMAP_EXTERN const shmap_mesh *shmap_ctx_mesh(const shmap_ctx *ctx);

/* This device's block of input k (NULL on error).  Read-only: it may be the
 * block a sharded array keeps on this device. */
SHMAP_EXTERN const shmap_block *shmap_in(shmap_ctx *ctx, int k);
/* Declare output k as a new block of the given dtype and shape (NULL on
 * error).  Its contents start as zeros. */
SHMAP_EXTERN shmap_block *shmap_out(shmap_ctx *ctx, int k, shmap_dtype dtype,
                                    int rank, const int64_t shape[]);
/* Declare output k as a copy of `src` and return it (NULL on error). */
SHMAP_EXTERN shmap_block *shmap_out_copy(shmap_ctx *ctx, int k,
                                         const shmap_block *src);
/* Declare output k as `block`: a block from shmap_block_alloc() or from a
 * shape-changing collective is taken over without copying, any other block
 * is copied. */
SHMAP_EXTERN int shmap_out_set(shmap_ctx *ctx, int k, shmap_block *block);

/* Scratch block owned by this device until the map returns (zeroed). */
SHMAP_EXTERN shmap_block *shmap_block_alloc(shmap_ctx *ctx, shmap_dtype dtype,
                                            int rank, const int64_t shape[]);
/* Free a block from shmap_block_alloc() or a collective before the map
 * returns.  Other blocks are an error. */
SHMAP_EXTERN int shmap_block_free(shmap_ctx *ctx, shmap_block *block);

/* Fail the body with a message: `return shmap_fail(ctx, "...", ...);`.
 * Returns SHMAP_EBODY. */
SHMAP_EXTERN int shmap_fail(shmap_ctx *ctx, const char *fmt, ...)
    SHMAP_PRINTF(2, 3);

/* ---- collectives (inside a body) --------------------------------------- */

/*
 * `axes` names one mesh axis ("j") or an ordered group ("('i','j')" or
 * "i,j").  The group of a device is every device that shares its
 * coordinates on the other axes; its rank is row-major over `axes`.
 */
SHMAP_EXTERN int shmap_axis_index(shmap_ctx *ctx, const char *axes);
SHMAP_EXTERN int shmap_axis_size(shmap_ctx *ctx, const char *axes);

/* Elementwise reductions over the group, in place, in rank order. */
SHMAP_EXTERN int shmap_psum(shmap_ctx *ctx, shmap_block *x, const char *axes);
SHMAP_EXTERN int shmap_pmax(shmap_ctx *ctx, shmap_block *x, const char *axes);
SHMAP_EXTERN int shmap_pmin(shmap_ctx *ctx, shmap_block *x, const char *axes);
/* psum divided by the group size; float dtypes only. */
SHMAP_EXTERN int shmap_pmean(shmap_ctx *ctx, shmap_block *x, const char *axes);

/* The same reductions out of place: x (any block, an input block too) is
 * only read, and the result is a new block stored in *out, owned by the
 * device like the results below.  psum of bool gives i32 counts. */
SHMAP_EXTERN int shmap_psum_new(shmap_ctx *ctx, const shmap_block *x,
                                const char *axes, shmap_block **out);
SHMAP_EXTERN int shmap_pmax_new(shmap_ctx *ctx, const shmap_block *x,
                                const char *axes, shmap_block **out);
SHMAP_EXTERN int shmap_pmin_new(shmap_ctx *ctx, const shmap_block *x,
                                const char *axes, shmap_block **out);
SHMAP_EXTERN int shmap_pmean_new(shmap_ctx *ctx, const shmap_block *x,
                                 const char *axes, shmap_block **out);

/* Shape-changing collectives store a new block, owned by the device until
 * the map returns (or shmap_block_free()), in *out. */
SHMAP_EXTERN int shmap_psum_scatter(shmap_ctx *ctx, const shmap_block *x,
                                    const char *axes, int scatter_dimension,
                                    int tiled, shmap_block **out);
SHMAP_EXTERN int shmap_all_gather(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, int axis, int tiled,
                                  shmap_block **out);
SHMAP_EXTERN int shmap_all_to_all(shmap_ctx *ctx, const shmap_block *x,
                                  const char *axes, int split_axis,
                                  int concat_axis, int tiled,
                                  shmap_block **out);
/* out[dst] = x[src] for each (src, dst) rank pair, in place; a device that
 * is nobody's destination gets zeros. */
SHMAP_EXTERN int shmap_ppermute(shmap_ctx *ctx, shmap_block *x,
                                const char *axes, int npairs,
                                const int pairs[][2]);
/* The same out of place: x is only read, the result is a new block. */
SHMAP_EXTERN int shmap_ppermute_new(shmap_ctx *ctx, const shmap_block *x,
                                    const char *axes, int npairs,
                                    const int pairs[][2], shmap_block **out);

/* ---- asynchronous collectives (inside a body) --------------------------- */

/*
 * A start function checks its arguments like the blocking call, reserves
 * the result and returns at once with an open request in *req; the
 * transfer then progresses on its own while the body computes, and
 * shmap_wait() completes it.  Between start and wait the input must not be
 * written and the result not read (SHMAP_ASYNC_CHECK=1 checks the input
 * and the result by checksums and fails the wait that finds a change).
 * Each start counts as one collective call, in program order, for every
 * member of the group; results equal the blocking call's bit for bit.  A
 * device may have at most SHMAP_MAX_REQUESTS requests open; a body that
 * returns with one open fails the map.  See shmap_ppermute_start(3).
 */
typedef struct shmap_request shmap_request;
#define SHMAP_MAX_REQUESTS 8

/* ppermute out of place: *out is the new result block (valid after wait). */
SHMAP_EXTERN int shmap_ppermute_start(shmap_ctx *ctx, const shmap_block *x,
                                      const char *axes, int npairs,
                                      const int pairs[][2], shmap_block **out,
                                      shmap_request **req);
SHMAP_EXTERN int shmap_all_gather_start(shmap_ctx *ctx, const shmap_block *x,
                                        const char *axes, int axis, int tiled,
                                        shmap_block **out, shmap_request **req);
SHMAP_EXTERN int shmap_psum_scatter_start(shmap_ctx *ctx, const shmap_block *x,
                                          const char *axes,
                                          int scatter_dimension, int tiled,
                                          shmap_block **out,
                                          shmap_request **req);
/* psum in place: x holds its input until the wait and the sum after it. */
SHMAP_EXTERN int shmap_psum_start(shmap_ctx *ctx, shmap_block *x,
                                  const char *axes, shmap_request **req);
/* Complete *req (it becomes NULL): 0, or the call's error. */
SHMAP_EXTERN int shmap_wait(shmap_ctx *ctx, shmap_request **req);
/* Complete every non-NULL reqs[i]; the first error, after waiting for all. */
SHMAP_EXTERN int shmap_wait_all(shmap_ctx *ctx, int n, shmap_request *reqs[]);
/* *done = 1 when the transfer of *req has finished (wait then returns at
 * once), else 0.  The request stays open either way. */
SHMAP_EXTERN int shmap_test(shmap_ctx *ctx, shmap_request *const *req,
                            int *done);

/* ---- processes (MPI) ----------------------------------------------------- */

/*
 * Started by mpirun (with a library built with MPI), a program is one of R
 * processes that each make the same library calls in the same order; each
 * mesh's devices are spread over them, R dividing the device count.
 * Without mpirun there is one process running every device.  See
 * shmap-mpi(7).
 */
/* This process's number in the job (0 without MPI), and the job's number of
 * processes (1 without MPI). */
SHMAP_EXTERN int shmap_process_rank(void);
SHMAP_EXTERN int shmap_process_count(void);
/* Choose the mesh axes whose coordinates decide the process of a device
 * ("i" or "('i','j')"; by default all axes, so each process gets a
 * contiguous range of device numbers).  Right after creating the mesh. */
SHMAP_EXTERN int shmap_mesh_set_process_axes(shmap_mesh *mesh,
                                             const char *axes);
/* The process that runs `device`. */
SHMAP_EXTERN int shmap_mesh_device_process(const shmap_mesh *mesh,
                                           int device);
/* Copy the blocks of this process's devices into `data` (row-major, the
 * whole array's shape); other elements are left as they are. */
SHMAP_EXTERN int shmap_array_to_host_local(const shmap_array *array,
                                           void *data);

/* ---- debugging ---------------------------------------------------------- */

/* Every `seconds` a map runs, print each device's state (running its body,
 * waiting in which collective over which axes, since when) to stderr.
 * 0 turns it off (the default; SHMAP_WATCHDOG=seconds sets it too). */
SHMAP_EXTERN int shmap_set_watchdog(double seconds);
/* Record every device's bodies and collectives (start, end, bytes, axes)
 * until shmap_trace_stop(), which writes them to `path` as a Chrome trace
 * (JSON; one track per device; opens in Perfetto).  SHMAP_TRACE=path
 * records the whole run and writes at exit. */
SHMAP_EXTERN int shmap_trace_start(const char *path);
SHMAP_EXTERN int shmap_trace_stop(void);


/* ---- parts of a mesh: partial-manual and nested maps, sub-meshes -------- */

/*
 * Options of shmap_map_ex() and shmap_map_nested().  Zero-initialise and
 * set what you need; a NULL options pointer means all defaults.
 */
typedef struct shmap_map_opts {
  unsigned flags;          /* SHMAP_NO_CHECK_REP */
  /* The map's manual axes, e.g. "data" or "('data', 'model')".  NULL or ""
   * means every axis the map may take: all axes of the mesh for
   * shmap_map_ex(), every free axis of the outer map for
   * shmap_map_nested().  Specs and collectives of the body may name only
   * manual axes; along the other (free) axes the body is not split and
   * devices hold equal values. */
  const char *manual_axes;
  /* Cluster rehearsal (shmap_rehearse(3)): price this map on a described
   * cluster, a preset name ("tpu-v5e-16x16") or a fabric file (".json").
   * NULL means the setting SHMAP_REHEARSE, which is off when unset. */
  const char *rehearse;
  /* Exploring device interleavings (shmap_explore(3)); these fields stay
   * together.  A schedule such as "r.12" (random walk, seed 12) or
   * "p3.12" (PCT of depth 3, with 2 priority change points): the map runs
   * one device at a time in the order the schedule chooses at every wait.
   * NULL: the mesh's scheduling mode.  shmap_map_nested() takes only
   * NULL. */
  const char *schedule;
  /* Room for options of later versions, so that the structure keeps its
   * size (README.md, "ABI policy").  New fields go before it, taking
   * their room from it; it must be zero (shmap_map_ex() and
   * shmap_map_nested() refuse the options otherwise), which
   * zero-initialising the structure gives. */
  uint64_t reserved[6];
} shmap_map_opts;

/* shmap_map() with options: a map over some axes of the mesh. */
SHMAP_EXTERN int shmap_map_ex(shmap_mesh *mesh, shmap_body_fn body, void *arg,
                              int nin, shmap_array *const in[],
                              const char *const in_specs[], int nout,
                              shmap_array *out[],
                              const char *const out_specs[],
                              const shmap_map_opts *opts);
/*
 * Inside a body: a map over some of the outer map's free axes, on the
 * body's blocks.  Input k (a block of this device) is split by in_specs[k]
 * over the inner axes; out[k] receives a new block of the outer body (a
 * scratch block, see shmap_block_alloc) assembled by out_specs[k].  Every
 * body instance of the outer map must make the same nested call (its
 * replicas along the inner axes join it).
 */
SHMAP_EXTERN int shmap_map_nested(shmap_ctx *ctx, shmap_body_fn body,
                                  void *arg, int nin,
                                  const shmap_block *const in[],
                                  const char *const in_specs[], int nout,
                                  shmap_block *out[],
                                  const char *const out_specs[],
                                  const shmap_map_opts *opts);
/* The context of the map this body's map is nested in (NULL for a map
 * that is not nested); collectives over the outer map's axes use it. */
SHMAP_EXTERN shmap_ctx *shmap_ctx_outer(const shmap_ctx *ctx);
/* The manual axes of the body's map in canonical form, e.g. "('i', 'j')";
 * returns the length, like snprintf. */
SHMAP_EXTERN int shmap_ctx_manual_axes(const shmap_ctx *ctx, char *buf,
                                       size_t len);

/*
 * Exploring device interleavings (shmap_explore(3)).  run() runs part of
 * the program on `mesh` (its maps, and whatever they need before and
 * after) and returns 0 or an error code; it may store a hash of its own
 * results in *digest (0 on entry).  shmap_explore() calls it once per
 * schedule, each map on `mesh` running one device at a time in the order
 * the schedule chooses at every wait, and checks each run: its return
 * code (a failing body, a mismatch, a deadlock, an asynchronous request's
 * rules under SHMAP_ASYNC_CHECK, which it turns on), and the hash of the
 * outputs of its maps and of *digest against the first schedule's.  The
 * first failure ends the search: res says which schedule and why, the
 * schedule's text (SHMAP_REPLAY's value) and its critical step.
 */
typedef struct shmap_explore_opts {
  int schedules;            /* how many (0: 100) */
  unsigned long long seed;  /* schedule i uses seed + i */
  int depth;                /* PCT's change points (0: 3) */
  const char *replay;       /* run only this schedule (NULL: search) */
  int quiet;                /* 1: print nothing on stderr */
} shmap_explore_opts;

typedef struct shmap_explore_result {
  int schedules;            /* schedules run */
  int failed;               /* index of the failing one, -1: none */
  int code;                 /* its error code */
  char replay[48];          /* its text, e.g. "p3.8" */
  char message[1024];       /* what failed */
  /* The critical step: the choice after which the failure was certain
   * (-1: unknown, or certain from the start), in map number
   * critical_map of the run, where device critical_dev went first. */
  long critical_step;
  int critical_map, critical_dev;
  /* The choices of the last schedule run: how many, and their hash (two
   * runs of one schedule made the same choices when these agree). */
  unsigned long steps;
  unsigned long long choices;
  /* The hash of that run's outputs (its maps' and its *digest): a replay
   * of a schedule whose outputs differed gives the same hash again. */
  unsigned long long outputs;
} shmap_explore_result;

typedef int (*shmap_explore_fn)(shmap_mesh *mesh, void *arg,
                                unsigned long long *digest);

SHMAP_EXTERN int shmap_explore(shmap_mesh *mesh, shmap_explore_fn run,
                               void *arg, const shmap_explore_opts *opts,
                               shmap_explore_result *res);

/*
 * Sub-meshes: a mesh over some devices of another.  shmap_mesh_slice()
 * fixes coordinates of some axes, e.g. "stage=1" of "stage=2, data=2,
 * model=2" is the mesh "data=2, model=2" over devices 4..7;
 * shmap_mesh_submesh() lays a new mesh (text as for shmap_mesh_create)
 * over the listed devices of `parent` (row-major order, all distinct).
 * Sub-meshes run maps independently of their parent and of each other, so
 * different slices may run maps at the same time from different threads.
 */
SHMAP_EXTERN int shmap_mesh_slice(shmap_mesh **sub, shmap_mesh *parent,
                                  const char *coords);
SHMAP_EXTERN int shmap_mesh_submesh(shmap_mesh **sub, shmap_mesh *parent,
                                    const char *text, const int devices[]);
/* The parent of a sub-mesh (NULL for a mesh made by shmap_mesh_create). */
SHMAP_EXTERN shmap_mesh *shmap_mesh_parent(const shmap_mesh *mesh);
/* The device of the parent mesh that device `device` of a sub-mesh is
 * (the device itself for a mesh without parent). */
SHMAP_EXTERN int shmap_mesh_parent_device(const shmap_mesh *mesh, int device);

/*
 * Move an array to `spec` on `mesh`, which may be any mesh (another
 * shape, another number of devices, a sub-mesh): every device of `mesh`
 * copies each piece of its block once, straight from a device of the
 * source mesh that holds it (the same physical device when it holds one).
 * Counted in the destination mesh's statistics (bytes_transferred).
 */
SHMAP_EXTERN int shmap_array_transfer(shmap_array **out,
                                      const shmap_array *array,
                                      shmap_mesh *mesh, const char *spec);


/* ---- groups within the axes, pbroadcast, ragged_all_to_all, preduce ----- */

/*
 * JAX's axis_index_groups: the ranks of the named axes (0 .. n-1) split
 * into `ngroups` groups of `size` ranks each, listed group after group in
 * `ranks` (ngroups*size entries, every rank exactly once).  With size 0
 * the groups may differ in size: each group's ranks are followed by -1
 * (psum, pmax and pmin take such groups, as in JAX).  Each group is a
 * collective of its own: a member's rank in it is its position in its
 * group's list, which orders gathers, scatters and reductions.  See
 * shmap_psum_groups(3).
 */
typedef struct shmap_groups {
  int ngroups;
  int size;
  const int *ranks;
} shmap_groups;

/* The reductions, all_gather, psum_scatter and all_to_all within groups;
 * a NULL `groups` means the whole group of the axes. */
SHMAP_EXTERN int shmap_psum_groups(shmap_ctx *ctx, shmap_block *x,
                                   const char *axes,
                                   const shmap_groups *groups);
SHMAP_EXTERN int shmap_pmax_groups(shmap_ctx *ctx, shmap_block *x,
                                   const char *axes,
                                   const shmap_groups *groups);
SHMAP_EXTERN int shmap_pmin_groups(shmap_ctx *ctx, shmap_block *x,
                                   const char *axes,
                                   const shmap_groups *groups);
SHMAP_EXTERN int shmap_pmean_groups(shmap_ctx *ctx, shmap_block *x,
                                    const char *axes,
                                    const shmap_groups *groups);
SHMAP_EXTERN int shmap_psum_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                       const char *axes,
                                       const shmap_groups *groups,
                                       shmap_block **out);
SHMAP_EXTERN int shmap_pmax_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                       const char *axes,
                                       const shmap_groups *groups,
                                       shmap_block **out);
SHMAP_EXTERN int shmap_pmin_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                       const char *axes,
                                       const shmap_groups *groups,
                                       shmap_block **out);
SHMAP_EXTERN int shmap_pmean_groups_new(shmap_ctx *ctx, const shmap_block *x,
                                        const char *axes,
                                        const shmap_groups *groups,
                                        shmap_block **out);
SHMAP_EXTERN int shmap_all_gather_groups(shmap_ctx *ctx, const shmap_block *x,
                                         const char *axes,
                                         const shmap_groups *groups, int axis,
                                         int tiled, shmap_block **out);
SHMAP_EXTERN int shmap_psum_scatter_groups(shmap_ctx *ctx,
                                           const shmap_block *x,
                                           const char *axes,
                                           const shmap_groups *groups,
                                           int scatter_dimension, int tiled,
                                           shmap_block **out);
SHMAP_EXTERN int shmap_all_to_all_groups(shmap_ctx *ctx, const shmap_block *x,
                                         const char *axes,
                                         const shmap_groups *groups,
                                         int split_axis, int concat_axis,
                                         int tiled, shmap_block **out);

/* Every member gets the block of the member of rank `source`: in place
 * (x is read on the source and overwritten on the others), and into a
 * new block. */
SHMAP_EXTERN int shmap_pbroadcast(shmap_ctx *ctx, shmap_block *x,
                                  const char *axes, int source);
SHMAP_EXTERN int shmap_pbroadcast_new(shmap_ctx *ctx, const shmap_block *x,
                                      const char *axes, int source,
                                      shmap_block **out);

/*
 * JAX's ragged_all_to_all over the rows (dimension 0) of `operand`: for
 * every rank j of the group, rows [input_offsets[j], +send_sizes[j]) go to
 * member j, where they land at rows [output_offsets[j], +send_sizes[j]) of
 * its `output`; recv_sizes[j] is the number of rows this member receives
 * from member j.  Rows of `output` nobody writes keep their values.  The
 * four arrays have one entry per rank of the group.
 */
SHMAP_EXTERN int shmap_ragged_all_to_all(
    shmap_ctx *ctx, const shmap_block *operand, shmap_block *output,
    const int64_t input_offsets[], const int64_t send_sizes[],
    const int64_t output_offsets[], const int64_t recv_sizes[],
    const char *axes);
/*
 * The same with JAX's full signature: the four arrays have `count`
 * entries (0: one per member of the group), a multiple of the group's size
 * n; with k = count / n, entry i is a slice for the member of rank i / k,
 * and recv_sizes[s k + j] is the size of the j-th slice member s sends
 * this member.  `groups` (NULL: the whole group of the axes) splits the
 * axes into axis_index_groups, as for shmap_psum_groups().
 */
SHMAP_EXTERN int shmap_ragged_all_to_all_groups(
    shmap_ctx *ctx, const shmap_block *operand, shmap_block *output,
    const int64_t input_offsets[], const int64_t send_sizes[],
    const int64_t output_offsets[], const int64_t recv_sizes[],
    int64_t count, const char *axes, const shmap_groups *groups);

/*
 * User-defined reductions (like MPI_Op_create): combine(inout, in, count,
 * arg) sets inout[i] = inout[i] (+) in[i] for `count` records of `width`
 * elements of the block's dtype each.  The members' blocks are folded in
 * rank order (acc = member 0's; acc = acc (+) member r's for r = 1, 2, ...),
 * so a deterministic combine gives bitwise reproducible results.  `name`
 * identifies the operation: members must use the same name and width.
 */
typedef void (*shmap_combine_fn)(void *inout, const void *in, int64_t count,
                                 void *arg);
typedef struct shmap_reduce_op {
  const char *name;
  shmap_combine_fn combine;
  void *arg;
  int width; /* elements per record; 0 means 1 */
} shmap_reduce_op;
SHMAP_EXTERN int shmap_preduce(shmap_ctx *ctx, shmap_block *x,
                               const char *axes, const shmap_reduce_op *op);
SHMAP_EXTERN int shmap_preduce_new(shmap_ctx *ctx, const shmap_block *x,
                                   const char *axes,
                                   const shmap_reduce_op *op,
                                   shmap_block **out);

/*
 * Cluster rehearsal (shmap_rehearse(3), shmap-rehearse(7)): a described
 * cluster (a fabric: a link class per mesh axis, and one device's peak
 * FLOP/s, memory bandwidth and capacity), from a preset name
 * ("tpu-v5e-16x16", "h100-8", "h100-multinode") or a JSON file.
 */
typedef struct shmap_fabric shmap_fabric;
SHMAP_EXTERN int shmap_fabric_load(shmap_fabric **fabric, const char *spec);
SHMAP_EXTERN void shmap_fabric_free(shmap_fabric *fabric);
/* Inside a body: the compute since the last collective does `flops`
 * floating-point operations and touches `bytes` bytes of memory; a
 * rehearsal prices the body's compute as the roofline of these on the
 * target device instead of the time measured here.  No effect (0) when
 * the map is not rehearsed. */
SHMAP_EXTERN int shmap_cost(shmap_ctx *ctx, double flops, double bytes);
/* The report of the last rehearsed map of this process (JSON, one line),
 * into buf; returns its length, like snprintf, or 0 with none. */
SHMAP_EXTERN int shmap_rehearse_report(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* SHMAP_H */
