/* SPDX-License-Identifier: MIT */
/* alloc.c - every allocation of the library goes through here, so tests
 * can make the k-th one fail and check that each failure path is clean. */
#include "internal.h"
#include "settings.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Allocations left before the injected failure (0: none planned). */
static _Atomic long countdown;
static _Atomic long failures;
/* Whose allocations count: NULL for every thread and device, else the
 * error buffer of the device that planted the failure (each device has its
 * own, on its thread or fiber, so it names the device in every mode). */
static _Atomic(const char *) owner;

void shmap__test_fail_alloc(long k)
{
  atomic_store(&failures, 0);
  atomic_store(&owner, (const char *)NULL);
  atomic_store(&countdown, k);
}

void shmap__test_fail_alloc_here(long k)
{
  atomic_store(&countdown, 0);
  atomic_store(&failures, 0);
  atomic_store(&owner, (const char *)shmap__errbuf());
  atomic_store(&countdown, k);
}

long shmap__test_alloc_failures(void) { return atomic_load(&failures); }

static bool inject(void)
{
  long left = atomic_load(&countdown);
  if (left <= 0)
    return false;
  const char *who = atomic_load(&owner);
  if (who && who != shmap__errbuf())
    return false;
  while (left > 0) {
    if (atomic_compare_exchange_weak(&countdown, &left, left - 1)) {
      if (left == 1) {
        atomic_fetch_add(&failures, 1);
        return true;
      }
      return false;
    }
  }
  return false;
}

void *shmap__malloc(size_t n)
{
  return inject() ? NULL : malloc(n ? n : 1);
}

void *shmap__calloc(size_t n, size_t size)
{
  return inject() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

/* Blocks of 2 MiB and more (arena chunks, staging buffers) are whole huge
 * pages, 2 MiB aligned, which the kernel is asked to back with transparent
 * huge pages (Linux' default policy gives them only where asked): a
 * transfer between processes pins and copies their pages one by one, and
 * with 4 KiB pages that took half the time of a 4 MiB ppermute over MPI;
 * copies within the process also take fewer TLB misses.  It costs up to
 * 2 MiB - 1 bytes of rounding per block; SHMAP_HUGEPAGES=0 turns it off. */
#define HUGE_PAGE ((size_t)2 << 20)

void *shmap__alloc(size_t n, bool zero)
{
  size_t rounded = (n + 63) & ~(size_t)63;
  if (rounded < n || inject())
    return NULL;
  void *p;
#ifdef MADV_HUGEPAGE
  if (rounded >= HUGE_PAGE && rounded <= SIZE_MAX - HUGE_PAGE &&
      shmap__setting_hugepages()) {
    size_t whole = (rounded + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    p = aligned_alloc(HUGE_PAGE, whole);
    if (p)
      (void)madvise(p, whole, MADV_HUGEPAGE); /* advice only */
  } else
#endif
    p = aligned_alloc(64, rounded ? rounded : 64);
  if (p && zero)
    memset(p, 0, rounded);
  return p;
}

size_t shmap__page_size(void)
{
  static _Atomic size_t page;
  size_t pg = atomic_load_explicit(&page, memory_order_relaxed);
  if (!pg) {
    long v = sysconf(_SC_PAGESIZE);
    pg = v > 0 ? (size_t)v : 4096;
    atomic_store_explicit(&page, pg, memory_order_relaxed);
  }
  return pg;
}

void *shmap__alloc_pages(size_t n)
{
  size_t pg = shmap__page_size();
  size_t whole = (n + pg - 1) & ~(pg - 1);
  if (whole < n || inject())
    return NULL;
  return aligned_alloc(pg, whole ? whole : pg);
}

void *shmap__realloc(void *p, size_t n)
{
  return inject() ? NULL : realloc(p, n ? n : 1);
}
