/* SPDX-License-Identifier: MIT */
/*
 * internal.h - declarations shared between the library's own files (and its
 * unit tests).  Nothing here is part of the public API; every name carries
 * the shmap__ prefix.
 */
#ifndef SHMAP_INTERNAL_H
#define SHMAP_INTERNAL_H

#include "config.h"

#include <shmap.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "group.h"

#ifdef __GNUC__
#define SHMAP__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SHMAP__PRINTF(a, b)
#endif

/* A small thread-local variable read on every collective call: the
 * initial-exec model makes each read one load instead of a call to
 * __tls_get_addr (a shared library's default).  It takes static TLS
 * space, which glibc reserves a surplus of for libraries loaded later
 * (dlopen); keep it to a few pointers. */
#if defined(__GNUC__) && defined(__ELF__)
#define SHMAP__TLS_FAST _Thread_local __attribute__((tls_model("initial-exec")))
#else
#define SHMAP__TLS_FAST _Thread_local
#endif

/* Longest axis name (including the terminating NUL). */
#define SHMAP__NAME_MAX 32
/* Longest detailed error message. */
#define SHMAP__MSG_MAX 1024
/* Named sizes for the buffers messages are built in; each holds its text
 * whole (a name is never cut).  A host name, as MPI gives it. */
#define SHMAP__HOST_MAX 256
/* " on process P (host H)": where a device or a call runs. */
#define SHMAP__WHERE_MAX (40 + SHMAP__HOST_MAX)
/* "device D (a=1, b=2) on process P (host H)": every axis at its longest. */
#define SHMAP__DEVNAME_MAX \
  (24 + SHMAP_MAX_AXES * (SHMAP__NAME_MAX + 16) + SHMAP__WHERE_MAX)
/* An axis list or spec as text ("'i', 'j'", "P('i', None)"). */
#define SHMAP__AXES_MAX (SHMAP_MAX_AXES * (SHMAP__NAME_MAX + 8) + 16)
/* A shape as text ("f32[8,16]"). */
#define SHMAP__SHAPE_MAX (16 + SHMAP_MAX_RANK * 22)

/* ---- error.c ----------------------------------------------------------- */

/* Set the calling thread's detailed message and return `code`. */
int shmap__err(int code, const char *fmt, ...) SHMAP__PRINTF(2, 3);
int shmap__verr(int code, const char *fmt, va_list ap);
/* Prefix the calling thread's current message ("<prefix>: <message>"). */
int shmap__err_prefix(int code, const char *fmt, ...) SHMAP__PRINTF(2, 3);
/* Copy a finished message into the calling thread's buffer. */
void shmap__err_set(const char *msg);
/* The calling thread's message buffer (SHMAP__MSG_MAX bytes). */
char *shmap__errbuf(void);
/* Use `buf` as this thread's message buffer (NULL: its own again); the
 * buffer used before (NULL: its own). */
char *shmap__errbuf_use(char *buf);
/* Append printf-style text to buf (of size n) at its current end. */
void shmap__cat(char *buf, size_t n, const char *fmt, ...) SHMAP__PRINTF(3, 4);

/* ---- mesh.c ------------------------------------------------------------ */

struct shmap__runtime;

struct shmap_mesh {
  int naxes;
  int ndev;
  char names[SHMAP_MAX_AXES][SHMAP__NAME_MAX];
  int sizes[SHMAP_MAX_AXES];
  /* Device-number stride of each axis (row-major numbering). */
  int strides[SHMAP_MAX_AXES];
  /* Device threads, created by the first map on this mesh. */
  struct shmap__runtime *rt;
  /* The user's reference plus one per sharded array on the mesh. */
  _Atomic int refs;
  /* This process's count of meshes created before this one, from 1: under
   * MPI every process creates its meshes in the same order, so the same
   * number names the same mesh everywhere. */
  int serial;
  /* Data movement counters (under the statistics lock of mesh.c). */
  shmap_stats stats;
  /* Which process runs each device (proc.h); NULL without MPI. */
  struct shmap__place *place;
  /* A sub-mesh (submesh.c): its parent, which it keeps alive, and per
   * device the parent's device number and the root mesh's (the mesh at
   * the top of the chain), which is the physical device.  NULL for a mesh
   * of its own.  A transport places a sub-mesh's device where it places
   * the root's device rootdev[d]. */
  shmap_mesh *parent;
  int *pdev;
  int *rootdev;
  /* Set by the mesh's creator (map/mesh.c), so that the geometry here
   * names devices and ends meshes without calling up: " on process P
   * (host H)" for a device placed on another process (proc.h), and the
   * teardown when the last reference goes.  NULL for neither. */
  void (*where)(const shmap_mesh *mesh, int dev, char *buf, size_t n);
  int (*destroy)(shmap_mesh *mesh);
};

void shmap__mesh_retain(shmap_mesh *mesh);
/* 0, or the error of the release over processes (transport/comm.h). */
int shmap__mesh_release(shmap_mesh *mesh);
/* Add a map's data movement to the mesh's counters. */
void shmap__mesh_stats_add(shmap_mesh *mesh, const shmap_stats *delta);

/* Coordinates of `dev` (no checks). */
void shmap__mesh_coords(const shmap_mesh *mesh, int dev, int coords[]);
/* "device 3 (i=1, j=1)" into buf. */
void shmap__mesh_devname(const shmap_mesh *mesh, int dev, char *buf, size_t n);
/* True when `name` is a valid axis name (identifier, not "None"). */
bool shmap__valid_axis_name(const char *name, size_t len);
/* A new mesh from axis names (NUL-terminated) and sizes; `src` is the text
 * it came from, for messages (may be NULL). */
int shmap__mesh_build(shmap_mesh **out, int naxes, const char *const names[],
                      const size_t lens[], const int sizes[], const char *src);
/* The same for a sub-mesh over devices pdev[] of `parent`, placed on the
 * processes where those devices run (proc.c). */
int shmap__mesh_build_over(shmap_mesh **out, int naxes,
                           const char *const names[], const size_t lens[],
                           const int sizes[], const char *src,
                           const shmap_mesh *parent, const int pdev[]);
/* The checks of a new mesh's axes: 0, or an error with the message set;
 * *ndev_out gets the device count. */
int shmap__mesh_check(int naxes, const char *const names[],
                      const size_t lens[], const int sizes[], const char *src,
                      long long *ndev_out);
/* A new mesh's geometry (names, sizes, strides) and its first reference. */
void shmap__mesh_fill(shmap_mesh *m, int naxes, const char *const names[],
                      const size_t lens[], const int sizes[], int ndev);
/* A root mesh's creation that this process rejects with `rc` (message
 * set): under MPI with several processes it still joins the creation's
 * agreement, so that every process returns the same error.  Returns the
 * call's result.  This, shmap__mesh_build and shmap__mesh_build_over are
 * the mesh's life, in map/mesh.c. */
int shmap__mesh_rejected(int rc);
/* Parse mesh text ("i=4, j=2") into names (pointers into text), lengths and
 * sizes; returns the number of axes or a negative error. */
int shmap__mesh_parse(const char *text, const char *names[], size_t lens[],
                      int sizes[]);
/* The mesh at the top of a chain of sub-meshes, and the device of it that
 * device `dev` of `mesh` is. */
const shmap_mesh *shmap__mesh_root(const shmap_mesh *mesh);
int shmap__mesh_rootdev(const shmap_mesh *mesh, int dev);
/* A slice of `parent` by the coordinates in `coords` ("stage=1"): its
 * axes (names into the parent's, lengths, sizes) and its devices in its
 * own row-major order (*devs, to free).  Returns the number of axes, or a
 * negative error (message set). */
int shmap__slice_devices(const shmap_mesh *parent, const char *coords,
                         const char *sn[], size_t sl[], int ss[], int **devs);
/* The axes of a sub-mesh from mesh text (as shmap__mesh_parse) and its
 * devices[] of `parent` checked: distinct and in range.  Returns the
 * number of axes, or a negative error (message set). */
int shmap__submesh_check(const shmap_mesh *parent, const char *text,
                         const int devices[], const char *names[],
                         size_t lens[], int sizes[]);
/* Bits of every axis of the mesh. */
static inline unsigned shmap__mesh_all(const shmap_mesh *mesh)
{
  return (1u << mesh->naxes) - 1u;
}

/* ---- spec.c ------------------------------------------------------------ */

/* A spec as parsed from text: names not yet checked against a mesh. */
typedef struct shmap__pspec {
  int ndims;
  int nnames[SHMAP_MAX_RANK];
  char names[SHMAP_MAX_RANK][SHMAP_MAX_AXES][SHMAP__NAME_MAX];
} shmap__pspec;

/* A spec resolved against a mesh: mesh axis numbers per entry.  ndims is
 * the number of entries as written (shorter specs are padded with unsplit
 * entries by the layout functions). */
typedef struct shmap__spec {
  int ndims;
  int naxes[SHMAP_MAX_RANK];
  int axes[SHMAP_MAX_RANK][SHMAP_MAX_AXES];
} shmap__spec;

/* Parse the text form (JAX's P(...) or the short form).  SHMAP_ESYNTAX with
 * a message naming the column on failure. */
int shmap__spec_parse(const char *text, shmap__pspec *out);
/* Parse and resolve against `mesh`: unknown axes and an axis used twice are
 * SHMAP_EAXIS errors naming the axis and the spec. */
int shmap__spec_resolve(const shmap_mesh *mesh, const char *text,
                        shmap__spec *out);
/* The same for a map whose manual axes are the bits of `manual`: an axis
 * of the mesh that is not manual is an SHMAP_EAXIS error naming it and the
 * manual axes. */
int shmap__spec_resolve_manual(const shmap_mesh *mesh, unsigned manual,
                               const char *text, shmap__spec *out);
/* Check that axes[] are manual (bits of `manual`); `op` and `text` name
 * the call in the message. */
int shmap__axes_manual(const shmap_mesh *mesh, unsigned manual, const char *op,
                       const char *text, const int axes[], int naxes);
/* "'i', 'j'" for the axes whose bits are set (or "none"). */
void shmap__mask_format(const shmap_mesh *mesh, unsigned mask, char *buf,
                        size_t n);
/* Check a resolved spec against an array: length <= rank, and when shape is
 * not NULL each dimension divisible by its count.  `what` names the spec
 * in messages (e.g. "in_specs[1]"). */
int shmap__spec_fit(const shmap_mesh *mesh, const char *what,
                    const char *text, const shmap__spec *spec, int rank,
                    const int64_t shape[]);
/* Canonical JAX form, e.g. "P('i', ('j', 'k'), None)". */
void shmap__spec_format(const shmap_mesh *mesh, const shmap__spec *spec,
                        char *buf, size_t n);
/* Parse the axes argument of a collective: "j", "('i','j')", "i, j", "()"
 * or "".  Fills mesh axis numbers in order.  `op` names the collective in
 * messages. */
int shmap__axes_parse(const shmap_mesh *mesh, const char *op,
                      const char *text, int axes[], int *naxes);
/* "('i', 'j')" or "'j'" for messages. */
void shmap__axes_format(const shmap_mesh *mesh, const int axes[], int naxes,
                        char *buf, size_t n);

/* ---- layout.c: pure index math ------------------------------------------ */

/* The largest element count or byte size of anything: half of INT64_MAX,
 * which leaves room for offsets, strides and rounded-up allocations. */
#define SHMAP__SIZE_MAX (INT64_MAX / 2)
/* a * b when both are >= 0 and the product is at most SHMAP__SIZE_MAX. */
bool shmap__mul_size(int64_t a, int64_t b, int64_t *out);
/* a / n for n > 0, without a 64-bit division where it can: a shift when n
 * is a power of two, a 32-bit division when a fits in 32 bits.  A 64-bit
 * division takes 40 to 90 cycles on the Xeon of BENCHMARKS.md, and a small
 * collective's plan made several (a group's size divides its shapes). */
static inline uint64_t shmap__udiv(uint64_t a, uint64_t n)
{
  if ((n & (n - 1)) == 0)
    return a >> __builtin_ctzll(n);
  if (a <= UINT32_MAX)
    return (uint32_t)a / (uint32_t)n;
  return a / n;
}
/* The same for sizes (a >= 0, n > 0), and a % n. */
static inline int64_t shmap__sdiv(int64_t a, int64_t n)
{
  return (int64_t)shmap__udiv((uint64_t)a, (uint64_t)n);
}
static inline int64_t shmap__smod(int64_t a, int64_t n)
{
  return a - shmap__sdiv(a, n) * n;
}
/* The one check of a shape's size: every dimension >= 0, and the bytes
 * of its elements (esize each; zero dimensions left out, since strides
 * still multiply the others) at most SHMAP__SIZE_MAX.  Returns 0 and sets
 * *numel and *bytes (either may be NULL), or SHMAP_ESHAPE with a message
 * "<what>: ..." naming the dimension. */
int shmap__shape_size(const char *what, int rank, const int64_t shape[],
                      size_t esize, int64_t *numel, int64_t *bytes);
/* Number of elements of a shape already checked by shmap__shape_size. */
int64_t shmap__numel(int rank, const int64_t shape[]);
/* shmap_block_numel and shmap_block_nbytes of a block already checked
 * (shmap__block_valid, or made by the library): no checks, no message. */
static inline size_t shmap__valid_numel(const shmap_block *b)
{
  return (size_t)shmap__numel(b->rank, b->shape);
}
static inline size_t shmap__valid_nbytes(const shmap_block *b)
{
  return shmap__valid_numel(b) * shmap_dtype_size(b->dtype);
}
/* memcpy and memset for sizes that may be 0: an empty block's data may be
 * NULL, which the C library's functions may not be given even for 0
 * bytes. */
static inline void shmap__copy(void *dst, const void *src, size_t n)
{
  if (n)
    memcpy(dst, src, n);
}
static inline void shmap__zero(void *dst, size_t n)
{
  if (n)
    memset(dst, 0, n);
}
/* Row-major strides in elements. */
void shmap__strides(int rank, const int64_t shape[], int64_t strides[]);
/* Product of the sizes of the axes in entry d (1 past the spec's end). */
int64_t shmap__entry_count(const shmap_mesh *mesh, const shmap__spec *spec,
                           int d);
/* Block index along entry d of the device at `coords` (row-major over the
 * entry's axes, first axis major). */
int64_t shmap__entry_index(const shmap_mesh *mesh, const shmap__spec *spec,
                           int d, const int coords[]);
void shmap__block_shape(const shmap_mesh *mesh, const shmap__spec *spec,
                        int rank, const int64_t gshape[], int64_t bshape[]);
/* Tiles a block shape: 0, or SHMAP_ESHAPE (message naming `what`) when a
 * dimension would exceed SHMAP__SIZE_MAX. */
int shmap__global_shape(const char *what, const shmap_mesh *mesh,
                        const shmap__spec *spec, int rank,
                        const int64_t bshape[], int64_t gshape[]);
/* Element offset of the block of the device at `coords`, per dimension. */
void shmap__block_offset(const shmap_mesh *mesh, const shmap__spec *spec,
                         int rank, const int64_t bshape[], const int coords[],
                         int64_t off[]);
/* Bit a set for each mesh axis named anywhere in the spec. */
unsigned shmap__spec_axes_mask(const shmap__spec *spec);
/* Copy an N-d box of `shape` (elements of esize bytes) between two strided
 * views (strides in elements).  rank 0 copies one element. */
void shmap__copy_box(void *dst, const int64_t dst_strides[], const void *src,
                     const int64_t src_strides[], int rank,
                     const int64_t shape[], size_t esize);

/* ---- array.c ----------------------------------------------------------- */

struct shmap_array {
  shmap_dtype dtype;
  int rank;
  int64_t shape[SHMAP_MAX_RANK];
  int64_t numel;
  /* A host array: row-major data, 64-byte aligned (NULL when sharded). */
  void *data;
  /* A sharded array: its mesh, spec, block shape, and per device a view of
   * its block and the allocation to free. */
  shmap_mesh *mesh;
  shmap__spec spec;
  int64_t bshape[SHMAP_MAX_RANK];
  shmap_block *blocks;
  void **mem;
};

/* True when two resolved specs lay out an array of `rank` identically
 * (after padding; an empty tuple equals None) (spec.c). */
bool shmap__spec_same(const shmap__spec *a, const shmap__spec *b, int rank);

/* Counts of one block built from an array, for the statistics. */
typedef struct shmap__moved {
  uint64_t host, local, moved;
} shmap__moved;

/* Build device `dev`'s block under spec `to` (block shape bshape) from
 * array `a` (host or sharded on the same mesh) into `dst`, reading each
 * piece from the device that holds it, itself first. */
/* Copy into `dst` (a block of shape bshape at element offset off[] of
 * the global array) every piece of array `a` it overlaps: from the host
 * array, or from a source device (of a's mesh) whose coordinates are the
 * piece's on the axes a's spec names and base[] on the others, except that
 * device `self` (of a's mesh, or -1) is read for every piece it holds.
 * Bytes are counted as host, local (from self) or moved. */
void shmap__copy_pieces(const shmap_array *a, const int64_t off[],
                        const int64_t bshape[], const int base[], int self,
                        void *dst, shmap__moved *count);
void shmap__gather_block(const shmap_array *a, const shmap_mesh *mesh,
                         const shmap__spec *to, const int64_t bshape[],
                         int dev, void *dst, shmap__moved *count);
/* A sharded array's block allocations (one per device) are no longer
 * needed: back to the devices' caches, or freed (device/arena.c). */
void shmap__blocks_release(shmap_mesh *mesh, void **mem);
/* Copy a sharded array's values into row-major host memory. */
void shmap__array_assemble(const shmap_array *a, void *dst);

/* Validate dtype, rank and shape; `what` names the caller in messages
 * (layout.c, with shmap__shape_format). */
int shmap__check_shape(const char *what, shmap_dtype dtype, int rank,
                       const int64_t shape[]);
/* New array with zeroed (zero=true) or uninitialised storage. */
int shmap__array_new(shmap_array **out, shmap_dtype dtype, int rank,
                     const int64_t shape[], bool zero);
/* "f32[2,8]" into buf (layout.c). */
/* The next index of the box lo..hi (inclusive) in row-major order: false
 * after the last (i is back at lo). */
bool shmap__index_next(int rank, int64_t i[], const int64_t lo[],
                       const int64_t hi[]);
void shmap__shape_format(shmap_dtype dtype, int rank, const int64_t shape[],
                         char *buf, size_t n);

/* Bulk memcpy, split over OpenMP threads when large. */
void shmap__bulk_copy(void *dst, const void *src, size_t bytes);

/* ---- fork.c ------------------------------------------------------------ */

/* Register the fork handlers (once; cheap after). */
void shmap__fork_init(void);
/* Call fn around every fork(): fn(0) before (take the locks a child must
 * not find held), fn(1) in the parent after, fn(2) in the child after.
 * Hooks run in the order registered before, in the reverse order after. */
void shmap__fork_hook(void (*fn)(int phase));
/* 0 in the process that first used the library, +1 per fork() since. */
unsigned shmap__fork_generation(void);

/* ---- alloc.c: every allocation of the library ---------------------------- */

/* 64-byte aligned allocation of n bytes (n may be 0); free with free(). */
void *shmap__alloc(size_t n, bool zero);
/* n bytes rounded up to whole pages, page-aligned (no huge pages: they
 * are protected page by page); free with free(). */
void *shmap__alloc_pages(size_t n);
/* The system's page size. */
size_t shmap__page_size(void);
void *shmap__malloc(size_t n);
void *shmap__calloc(size_t n, size_t size);
void *shmap__realloc(void *p, size_t n);
/* Tests: make the k-th allocation from now fail (0: none), and count the
 * failures injected since. */
void shmap__test_fail_alloc(long k);
/* The same, counting only the allocations of the calling device (or
 * thread), so other devices running meanwhile cannot take the failure. */
void shmap__test_fail_alloc_here(long k);
long shmap__test_alloc_failures(void);

#endif /* SHMAP_INTERNAL_H */
