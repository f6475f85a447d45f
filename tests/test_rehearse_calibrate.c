/* SPDX-License-Identifier: MIT */
/*
 * test_rehearse_calibrate.c - the round trip of bench/calibrate: the
 * fabric file it wrote (argv[1]) loads with shmap_fabric_load, and the
 * collectives are priced to what its alpha (call latency) and beta
 * (bandwidth) say, read here from the file with jansson.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "rehearse/fabric.h"

static int fails;

static void expect(const char *what, double got, double want)
{
  double d = got - want;
  if (d < 0)
    d = -d;
  if (d > 1e-12 * (want < 0 ? -want : want)) {
    fprintf(stderr, "%s: got %.17g, want %.17g\n", what, got, want);
    fails++;
  }
}

static double num(json_t *o, const char *key)
{
  json_t *v = json_object_get(o, key);
  if (!json_is_number(v)) {
    fprintf(stderr, "the file has no number '%s'\n", key);
    exit(1);
  }
  return json_number_value(v);
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s FABRIC.json\n", argv[0]);
    return 2;
  }
  json_error_t err;
  json_t *root = json_load_file(argv[1], 0, &err);
  if (root == NULL) {
    fprintf(stderr, "%s: %s\n", argv[1], err.text);
    return 1;
  }
  json_t *lvj = json_array_get(json_object_get(root, "levels"), 0);
  double alpha = num(lvj, "call_latency"), beta = num(lvj, "bandwidth");
  double flops = num(json_object_get(root, "device"), "flops");
  json_decref(root);
  if (!(alpha > 0 && beta > 0 && flops > 0)) {
    fprintf(stderr, "alpha %g, beta %g, flops %g: not all positive\n", alpha,
            beta, flops);
    return 1;
  }
  shmap_fabric *f;
  if (shmap_fabric_load(&f, argv[1]) < 0) {
    fprintf(stderr, "%s\n", shmap_errmsg());
    return 1;
  }
  const shmap__level *lv = &f->levels[0];
  expect("level bandwidth", lv->bw, beta);
  expect("level call latency", lv->call, alpha);
  expect("device flops", f->flops, flops);
  /* A ppermute of 1 MB: one call and the bytes at beta. */
  expect("ppermute 1e6 B", shmap__price_p2p(lv, 1e6, 1, 1), alpha + 1e6 / beta);
  /* A tiny one costs the call: no hop latency here. */
  expect("ppermute 4 B", shmap__price_p2p(lv, 4, 1, 1), alpha + 4 / beta);
  /* all_gather over 8 through the switch: V (n-1)/n at beta. */
  shmap__phase p = {lv, 8, 1, 0};
  expect("all_gather 8e6 B", shmap__price_all_gather(&p, 8e6),
         alpha + 8e6 * 7 / 8 / beta);
  expect("psum 8e6 B", shmap__price_all_reduce(&p, 8e6),
         alpha + 2 * 8e6 * 7 / 8 / beta);
  expect("compute 1e9 FLOP", shmap__price_compute(f, 1e9, 0), 1e9 / flops);
  shmap_fabric_free(f);
  return fails != 0;
}
