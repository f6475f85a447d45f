/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - described clusters: the built-in presets, a user's JSON file
 * (read with jansson), and which link class each mesh axis takes.
 *
 * The presets' figures are the published ones (shmap-rehearse(7) cites
 * them): TPU v5e from Google Cloud's TPU v5e page and the "How to Scale
 * Your Model" book (ICI 4.5e10 B/s per link per direction, 1 us per hop,
 * 197 TFLOP/s bf16, 819 GB/s HBM, 16 GiB); H100 SXM from NVIDIA's H100
 * datasheet (989 TFLOP/s dense bf16, 3.35 TB/s HBM3, 80 GB, NVLink 450
 * GB/s per direction per GPU) and a 400 Gb/s InfiniBand NDR port per GPU
 * across nodes.  The latencies of the H100 presets are not published
 * figures but round values the manual page states as such.
 */
#include "rehearse/fabric.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const topo_names[] = {"ring", "torus-nowrap", "switch",
                                         "full"};

const char *shmap__topo_name(int topo)
{
  return topo >= 0 && topo < 4 ? topo_names[topo] : "?";
}

/* "torus" is a ring per axis; the other names are the enum's. */
static int topo_parse(const char *s)
{
  if (strcmp(s, "torus") == 0)
    return SHMAP__TOPO_RING;
  for (int t = 0; t < 4; t++)
    if (strcmp(s, topo_names[t]) == 0)
      return t;
  return -1;
}

static void level_set(shmap__level *lv, const char *name, int topo,
                      double bw, double hop, double call)
{
  snprintf(lv->name, sizeof lv->name, "%s", name);
  lv->topo = topo;
  lv->bw = bw;
  lv->hop = hop;
  lv->call = call;
}

/* The presets; 0, or 1 when `name` is none of them. */
static int preset(shmap_fabric *f, const char *name)
{
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  snprintf(f->source, sizeof f->source, "preset %s", name);
  if (strcmp(name, "tpu-v5e-16x16") == 0) {
    f->flops = 1.97e14;
    f->membw = 8.19e11;
    f->memcap = 16.0 * 1024 * 1024 * 1024;
    f->nlevels = 1;
    level_set(&f->levels[0], "ici", SHMAP__TOPO_RING, 4.5e10, 1e-6, 0);
    f->naxes = 1;
    return 0;
  }
  if (strcmp(name, "h100-8") != 0 && strcmp(name, "h100-multinode") != 0)
    return 1;
  f->flops = 9.89e14;
  f->membw = 3.35e12;
  f->memcap = 80e9;
  level_set(&f->levels[0], "nvlink", SHMAP__TOPO_SWITCH, 4.5e11, 1e-6, 0);
  f->nlevels = 1;
  f->naxes = 1;
  if (name[5] == 'm') {
    /* Across nodes first, as a mesh "node=N, gpu=8" lists its axes. */
    level_set(&f->levels[1], "infiniband", SHMAP__TOPO_SWITCH, 5e10, 5e-6, 0);
    f->nlevels = 2;
    f->naxes = 2;
    f->axis_level[0] = 1;
    f->axis_level[1] = 0;
  }
  return 0;
}

const shmap__level *shmap__fabric_axis(const shmap_fabric *f,
                                       const shmap_mesh *mesh, int a)
{
  for (int k = 0; k < f->naxes; k++)
    if (f->axis_names[k][0] && strcmp(f->axis_names[k], mesh->names[a]) == 0)
      return &f->levels[f->axis_level[k]];
  int k = a < f->naxes ? a : f->naxes - 1;
  return &f->levels[f->axis_level[k]];
}

/* ---- a user's file ---------------------------------------------------- */

static int bad(const char *path, const char *key, const char *why)
{
  return shmap__err(SHMAP_EINVAL, "shmap_fabric_load: %s: key '%s': %s", path,
                    key, why);
}

/* A positive number at obj[key] into *out; `need`: absent is an error. */
static int number(const char *path, json_t *obj, const char *where,
                  const char *key, bool need, double *out)
{
  char full[160];
  snprintf(full, sizeof full, "%s%s", where, key);
  json_t *v = json_object_get(obj, key);
  if (!v)
    return need ? bad(path, full, "missing") : 0;
  if (!json_is_number(v)) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    char why[200];
    snprintf(why, sizeof why, "value %.120s is not a number",
             text ? text : "?");
    free(text);
    return bad(path, full, why);
  }
  double x = json_number_value(v);
  if (!(x >= 0) || (need && x == 0)) {
    char why[120];
    snprintf(why, sizeof why, "value %g is not %s", x,
             need ? "positive" : "zero or positive");
    return bad(path, full, why);
  }
  *out = x;
  return 0;
}

/* A string at obj[key] (NULL when absent and not needed). */
static int string(const char *path, json_t *obj, const char *where,
                  const char *key, bool need, const char **out)
{
  char full[160];
  snprintf(full, sizeof full, "%s%s", where, key);
  json_t *v = json_object_get(obj, key);
  *out = NULL;
  if (!v)
    return need ? bad(path, full, "missing") : 0;
  if (!json_is_string(v) || json_string_length(v) == 0 ||
      json_string_length(v) >= SHMAP__FABRIC_NAME_MAX) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    char why[200];
    snprintf(why, sizeof why,
             "value %.120s is not a name (a string of 1 to %d characters)",
             text ? text : "?", SHMAP__FABRIC_NAME_MAX - 1);
    free(text);
    return bad(path, full, why);
  }
  *out = json_string_value(v);
  return 0;
}

static int level_load(const char *path, json_t *o, int i, shmap__level *lv)
{
  char where[48];
  snprintf(where, sizeof where, "levels[%d].", i);
  if (!json_is_object(o))
    return bad(path, "levels", "every entry must be an object");
  const char *name, *topo;
  int rc;
  if ((rc = string(path, o, where, "name", true, &name)) ||
      (rc = string(path, o, where, "topology", true, &topo)))
    return rc;
  int t = topo_parse(topo);
  if (t < 0) {
    char why[160], full[64];
    snprintf(why, sizeof why,
             "value '%.60s' is not one of ring, torus, torus-nowrap, "
             "switch, full", topo);
    snprintf(full, sizeof full, "%stopology", where);
    return bad(path, full, why);
  }
  double bw = 0, hop = 0, call = 0;
  if ((rc = number(path, o, where, "bandwidth", true, &bw)) ||
      (rc = number(path, o, where, "hop_latency", false, &hop)) ||
      (rc = number(path, o, where, "call_latency", false, &call)))
    return rc;
  level_set(lv, name, t, bw, hop, call);
  return 0;
}

static int axis_load(const char *path, shmap_fabric *f, json_t *o, int i)
{
  char where[48];
  snprintf(where, sizeof where, "axes[%d].", i);
  if (!json_is_object(o))
    return bad(path, "axes", "every entry must be an object");
  const char *name, *level;
  int rc;
  if ((rc = string(path, o, where, "name", false, &name)) ||
      (rc = string(path, o, where, "level", true, &level)))
    return rc;
  snprintf(f->axis_names[i], sizeof f->axis_names[i], "%s", name ? name : "");
  for (int l = 0; l < f->nlevels; l++)
    if (strcmp(f->levels[l].name, level) == 0) {
      f->axis_level[i] = l;
      return 0;
    }
  char why[160], full[64];
  snprintf(why, sizeof why, "value '%s' names no entry of \"levels\"", level);
  snprintf(full, sizeof full, "%slevel", where);
  return bad(path, full, why);
}

/* The device's figures and the lists of levels and axes. */
static int root_load(const char *path, shmap_fabric *f, json_t *root)
{
  const char *name;
  int rc;
  if ((rc = string(path, root, "", "name", false, &name)))
    return rc;
  snprintf(f->name, sizeof f->name, "%s", name ? name : "custom");
  json_t *dev = json_object_get(root, "device");
  if (!json_is_object(dev))
    return bad(path, "device", dev ? "value is not an object" : "missing");
  if ((rc = number(path, dev, "device.", "flops", true, &f->flops)) ||
      (rc = number(path, dev, "device.", "memory_bandwidth", true,
                   &f->membw)) ||
      (rc = number(path, dev, "device.", "memory_bytes", true, &f->memcap)))
    return rc;
  json_t *lv = json_object_get(root, "levels");
  if (!json_is_array(lv) || json_array_size(lv) == 0 ||
      json_array_size(lv) > SHMAP__FABRIC_LEVELS)
    return bad(path, "levels",
               lv ? "value is not a list of 1 to 8 objects" : "missing");
  f->nlevels = (int)json_array_size(lv);
  for (int i = 0; i < f->nlevels; i++)
    if ((rc = level_load(path, json_array_get(lv, (size_t)i), i,
                         &f->levels[i])))
      return rc;
  json_t *ax = json_object_get(root, "axes");
  if (!ax) {
    f->naxes = 1; /* every axis on the first level */
    return 0;
  }
  if (!json_is_array(ax) || json_array_size(ax) == 0 ||
      json_array_size(ax) > SHMAP_MAX_AXES)
    return bad(path, "axes", "value is not a list of 1 to 8 objects");
  f->naxes = (int)json_array_size(ax);
  for (int i = 0; i < f->naxes; i++)
    if ((rc = axis_load(path, f, json_array_get(ax, (size_t)i), i)))
      return rc;
  return 0;
}

static int file_load(shmap_fabric *f, const char *path)
{
  memset(f, 0, sizeof *f);
  snprintf(f->source, sizeof f->source, "%s", path);
  json_error_t jerr;
  json_t *root = json_load_file(path, 0, &jerr);
  if (!root)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_fabric_load: %s: line %d column %d: %s", path,
                      jerr.line, jerr.column, jerr.text);
  int rc = json_is_object(root)
               ? root_load(path, f, root)
               : bad(path, "(top level)", "value is not an object");
  json_decref(root);
  return rc;
}

SHMAP_EXTERN int shmap_fabric_load(shmap_fabric **out, const char *spec)
{
  if (!out)
    return shmap__err(SHMAP_EINVAL, "shmap_fabric_load: out is NULL");
  *out = NULL;
  if (!spec || !*spec)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_fabric_load: no preset name or file given "
                      "(presets: tpu-v5e-16x16, h100-8, h100-multinode)");
  shmap_fabric *f = calloc(1, sizeof *f);
  if (!f)
    return shmap__err(SHMAP_ENOMEM, "shmap_fabric_load: out of memory");
  int rc = 0;
  if (preset(f, spec) != 0) {
    /* A name without a slash or a ".json" is meant as a preset. */
    size_t n = strlen(spec);
    if (!strchr(spec, '/') && (n < 5 || strcmp(spec + n - 5, ".json") != 0))
      rc = shmap__err(SHMAP_EINVAL,
                      "shmap_fabric_load: '%s' is no preset (tpu-v5e-16x16, "
                      "h100-8, h100-multinode) and no .json file",
                      spec);
    else
      rc = file_load(f, spec);
  }
  if (rc) {
    free(f);
    return rc;
  }
  *out = f;
  return 0;
}

SHMAP_EXTERN void shmap_fabric_free(shmap_fabric *f) { free(f); }
