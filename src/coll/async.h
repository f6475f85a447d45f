/* SPDX-License-Identifier: MIT */
/*
 * async.h - asynchronous collectives (async.c): what the rest of the
 * library needs to know of a device's open requests.
 */
#ifndef SHMAP_ASYNC_H
#define SHMAP_ASYNC_H

#include "sched/sched.h"

#include <stdio.h>

struct shmap_ctx;

/* A blocking collective is about to enter the transport on this device:
 * wait until every transfer the device started has been carried out, so
 * that the transport sees the device's calls one at a time, in order. */
void shmap__async_drain(struct shmap_ctx *ctx);
/* Whether the device has transfers posted and not yet carried out. */
bool shmap__async_busy(const struct shmap_ctx *ctx);
/* The body of ctx returned (a map's, or a nested map's): a request it
 * started and left open fails the map, naming the call; every transfer is
 * then finished and the body's requests released, so that nothing writes
 * into its blocks once they are freed. */
void shmap__async_body_end(struct shmap_ctx *ctx);
/* shmap_block_free of block b, whose chunk holds `cap` bytes at data:
 * SHMAP_ESTATE (the map failed, naming the request) when an open request
 * of the device reads or writes it, else 0. */
int shmap__async_block_free(struct shmap_ctx *ctx, const shmap_block *b,
                            const void *data, size_t cap);
/* The watchdog: a line per open request of device d. */
void shmap__async_report(shmap__runtime *rt, int d, uint64_t now, FILE *out);
/* The bytes the runtime's request tables take (tests): a pointer per
 * device and, in *per_device bytes each, the requests of each device that
 * started one. */
size_t shmap__async_table_bytes(shmap__runtime *rt, size_t *per_device);
/* The runtime goes away. */
void shmap__async_destroy(shmap__runtime *rt);

#endif /* SHMAP_ASYNC_H */
