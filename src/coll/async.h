/* SPDX-License-Identifier: MIT */
/*
 * async.h - asynchronous collectives (async.c): what the rest of the
 * library needs to know of a device's open requests.
 */
#ifndef SHMAP_ASYNC_H
#define SHMAP_ASYNC_H

#include "runtime/sched.h"

#include <stdio.h>

struct shmap_ctx;

/* A blocking collective is about to enter the transport on this device:
 * wait until every transfer the device started has been carried out, so
 * that the transport sees the device's calls one at a time, in order. */
void shmap__async_drain(struct shmap_ctx *ctx);
/* Whether the device has transfers posted and not yet carried out. */
bool shmap__async_busy(const struct shmap_ctx *ctx);
/* The body returned: a request still open fails the map, naming the call;
 * every request is then finished and released. */
void shmap__async_body_end(struct shmap_ctx *ctx);
/* The watchdog: a line per open request of device d. */
void shmap__async_report(shmap__runtime *rt, int d, uint64_t now, FILE *out);
/* The runtime goes away. */
void shmap__async_destroy(shmap__runtime *rt);

#endif /* SHMAP_ASYNC_H */
