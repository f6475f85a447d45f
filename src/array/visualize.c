/* SPDX-License-Identifier: MIT */
/* visualize.c - a text picture of which device holds which block. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Cell text: the devices holding one block, abbreviated past a few. */
static void cell_text(const int *devs, int n, char *buf, size_t len)
{
  buf[0] = '\0';
  const int shown = 6;
  for (int i = 0; i < n && i < shown; i++)
    shmap__cat(buf, len, "%sd%d", i ? " " : "", devs[i]);
  if (n > shown)
    shmap__cat(buf, len, " +%d more", n - shown);
}

static void rule(FILE *out, int cols, int width)
{
  for (int c = 0; c < cols; c++) {
    fputc('+', out);
    for (int i = 0; i < width; i++)
      fputc('-', out);
  }
  fputs("+\n", out);
}

SHMAP_EXTERN int shmap_array_visualize(const shmap_array *array, FILE *out)
{
  if (!array || !out)
    return shmap__err(SHMAP_EINVAL, "shmap_array_visualize: NULL argument");
  if (array->rank > 2)
    return shmap__err(SHMAP_ESHAPE,
                      "shmap_array_visualize: arrays of rank %d cannot be "
                      "drawn; rank 0, 1 and 2 can",
                      array->rank);
  char shape[128];
  shmap__shape_format(array->dtype, array->rank, array->shape, shape, sizeof shape);
  if (!array->mesh) {
    fprintf(out, "%s on the host (not sharded)\n", shape);
    return 0;
  }
  const shmap_mesh *mesh = array->mesh;
  int64_t rows = array->rank == 2 ? shmap__entry_count(mesh, &array->spec, 0) : 1;
  int64_t cols = array->rank == 0 ? 1
                 : shmap__entry_count(mesh, &array->spec, array->rank - 1);
  /* Devices per cell, in device order. */
  int *count = shmap__calloc((size_t)(rows * cols), sizeof *count);
  int *list = shmap__malloc(sizeof(int) * (size_t)mesh->ndev);
  int *cell_of = shmap__malloc(sizeof(int) * (size_t)mesh->ndev);
  if (!count || !list || !cell_of) {
    free(count);
    free(list);
    free(cell_of);
    return shmap__err(SHMAP_ENOMEM, "shmap_array_visualize: out of memory");
  }
  for (int d = 0; d < mesh->ndev; d++) {
    int c[SHMAP_MAX_AXES];
    shmap__mesh_coords(mesh, d, c);
    int64_t r = array->rank == 2 ? shmap__entry_index(mesh, &array->spec, 0, c) : 0;
    int64_t k = array->rank == 0 ? 0
                : shmap__entry_index(mesh, &array->spec, array->rank - 1, c);
    cell_of[d] = (int)(r * cols + k);
    count[cell_of[d]]++;
  }
  int width = 0;
  char text[160];
  for (int64_t cell = 0; cell < rows * cols; cell++) {
    int n = 0;
    for (int d = 0; d < mesh->ndev; d++)
      if (cell_of[d] == cell)
        list[n++] = d;
    cell_text(list, n, text, sizeof text);
    if ((int)strlen(text) > width)
      width = (int)strlen(text);
  }
  width += 2;
  char spec[512], bshape[128], axes[256] = "";
  shmap__spec_format(mesh, &array->spec, spec, sizeof spec);
  shmap__shape_format(array->dtype, array->rank, array->bshape, bshape, sizeof bshape);
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(axes, sizeof axes, "%s%s=%d", a ? ", " : "", mesh->names[a],
               mesh->sizes[a]);
  fprintf(out, "%s sharded %s over mesh %s: %lldx%lld blocks of %s\n", shape,
          spec, axes, (long long)rows, (long long)cols, bshape);
  for (int64_t r = 0; r < rows; r++) {
    rule(out, (int)cols, width);
    for (int64_t k = 0; k < cols; k++) {
      int n = 0;
      for (int d = 0; d < mesh->ndev; d++)
        if (cell_of[d] == r * cols + k)
          list[n++] = d;
      cell_text(list, n, text, sizeof text);
      int pad = width - (int)strlen(text);
      fprintf(out, "|%*s%s%*s", pad / 2, "", text, pad - pad / 2, "");
    }
    fputs("|\n", out);
  }
  rule(out, (int)cols, width);
  free(count);
  free(list);
  free(cell_of);
  return 0;
}
