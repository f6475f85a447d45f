/* SPDX-License-Identifier: MIT */
/* svg.c - an SVG picture of which device holds which block, and of the
 * blocks' values, for one array or several stacked (before and after). */
#include "internal.h"
#include "dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One fill per device, device d taking entry d % 8.  The colours are
 * light enough for black text and far enough apart that a program reading
 * a screenshot can tell them apart exactly (tests/check-pictures.py keeps
 * the same list). */
static const char *const palette[8] = {"#8dd3c7", "#ffffb3", "#bebada",
                                       "#fb8072", "#80b1d3", "#fdb462",
                                       "#b3de69", "#fccde5"};

enum { CHAR_W = 8, LINE_H = 16, PAD = 8, GAP = 4, CAPTION_H = 28,
       SHOW_DEVS = 6, MAX_VALUE_LINES = 8, MAX_LINE_VALUES = 16,
       MIN_CELL_W = 96 };

/* What one array's grid is made of: its cells, and per device its cell. */
typedef struct grid {
  const shmap_array *a;
  int64_t rows, cols;
  int *cell_of; /* per device; empty for a host array */
  int lines;    /* text lines per cell */
  int cell_w;   /* widest cell text, in pixels */
} grid;

static void put_escaped(FILE *out, const char *s)
{
  for (; *s; s++) {
    if (*s == '<')
      fputs("&lt;", out);
    else if (*s == '>')
      fputs("&gt;", out);
    else if (*s == '&')
      fputs("&amp;", out);
    else if (*s == '"')
      fputs("&quot;", out);
    else
      fputc(*s, out);
  }
}

/* Value lines of device d's block: a rank-2 block gives a line per row,
 * others one line; a block too large to read in a cell gives its count. */
static int value_lines(const grid *g, int d, int line, char *buf, size_t len)
{
  const shmap_array *a = g->a;
  const shmap_block *b = &a->blocks[d];
  int64_t brows = a->rank == 2 ? a->bshape[0] : 1;
  int64_t bcols = a->rank == 0 ? 1 : a->bshape[a->rank - 1];
  buf[0] = '\0';
  if (brows > MAX_VALUE_LINES || bcols > MAX_LINE_VALUES) {
    if (line == 0)
      shmap__cat(buf, len, "(%lld values)", (long long)(brows * bcols));
    return 1;
  }
  if (line < brows && b->data) {
    size_t esize = shmap_dtype_size(a->dtype);
    for (int64_t c = 0; c < bcols; c++) {
      char v[64];
      shmap__dtype_format(a->dtype,
                          (const char *)b->data + (size_t)(line * bcols + c) * esize,
                          v, sizeof v);
      shmap__cat(buf, len, "%s%s", c ? " " : "", v);
    }
  } else if (line == 0 && !b->data) {
    shmap__cat(buf, len, "(held by another process)");
  }
  return (int)brows;
}

/* Line `line` of a cell's text: its devices, its index range, then its
 * values (of its first device's block) when asked for. */
static void cell_line(const grid *g, const int *devs, int n, int line,
                      unsigned flags, char *buf, size_t len)
{
  const shmap_array *a = g->a;
  buf[0] = '\0';
  if (line == 0) {
    for (int i = 0; i < n && i < SHOW_DEVS; i++)
      shmap__cat(buf, len, "%sd%d", i ? " " : "", devs[i]);
    if (n > SHOW_DEVS)
      shmap__cat(buf, len, " +%d more", n - SHOW_DEVS);
  } else if (line == 1) {
    int c[SHMAP_MAX_AXES];
    int64_t off[SHMAP_MAX_RANK] = {0};
    shmap__mesh_coords(a->mesh, devs[0], c);
    shmap__block_offset(a->mesh, &a->spec, a->rank, a->bshape, c, off);
    shmap__cat(buf, len, "[");
    for (int k = 0; k < a->rank; k++)
      shmap__cat(buf, len, "%s%lld:%lld", k ? ", " : "", (long long)off[k],
                 (long long)(off[k] + a->bshape[k]));
    shmap__cat(buf, len, "]");
  } else if (flags & SHMAP_SVG_VALUES) {
    value_lines(g, devs[0], line - 2, buf, len);
  }
}

/* The devices of cell `cell`, in device order; returns how many. */
static int cell_devs(const grid *g, int64_t cell, int *devs)
{
  int n = 0;
  for (int d = 0; d < g->a->mesh->ndev; d++)
    if (g->cell_of[d] == cell)
      devs[n++] = d;
  return n;
}

/* Lay out one array: its cells, its text lines and its widest line. */
static int grid_plan(grid *g, const shmap_array *a, unsigned flags, int *devs)
{
  memset(g, 0, sizeof *g);
  g->a = a;
  g->rows = g->cols = 1;
  g->lines = 1;
  g->cell_w = MIN_CELL_W;
  if (!a->mesh)
    return 0;
  const shmap_mesh *mesh = a->mesh;
  g->rows = a->rank == 2 ? shmap__entry_count(mesh, &a->spec, 0) : 1;
  g->cols = a->rank == 0 ? 1 : shmap__entry_count(mesh, &a->spec, a->rank - 1);
  g->cell_of = shmap__malloc(sizeof(int) * (size_t)mesh->ndev);
  if (!g->cell_of)
    return shmap__err(SHMAP_ENOMEM, "shmap_array_visualize_svg: out of memory");
  for (int d = 0; d < mesh->ndev; d++) {
    int c[SHMAP_MAX_AXES];
    shmap__mesh_coords(mesh, d, c);
    int64_t r = a->rank == 2 ? shmap__entry_index(mesh, &a->spec, 0, c) : 0;
    int64_t k = a->rank == 0 ? 0 : shmap__entry_index(mesh, &a->spec, a->rank - 1, c);
    g->cell_of[d] = (int)(r * g->cols + k);
  }
  char vb[SHMAP__MSG_MAX];
  g->lines = 2;
  if (flags & SHMAP_SVG_VALUES)
    g->lines += value_lines(g, 0, 0, vb, sizeof vb);
  for (int64_t cell = 0; cell < g->rows * g->cols; cell++) {
    int n = cell_devs(g, cell, devs);
    for (int line = 0; n && line < g->lines; line++) {
      cell_line(g, devs, n, line, flags, vb, sizeof vb);
      int w = (int)strlen(vb) * CHAR_W + 2 * PAD;
      if (w > g->cell_w)
        g->cell_w = w;
    }
  }
  return 0;
}

static int grid_height(const grid *g)
{
  return CAPTION_H + (int)g->rows * (g->lines * LINE_H + 2 * PAD + GAP);
}

/* The caption: the caller's words, then shape, spec and mesh. */
static void caption_text(const shmap_array *a, const char *caption, char *buf,
                         size_t len)
{
  char shape[128], spec[512];
  shmap__shape_format(a->dtype, a->rank, a->shape, shape, sizeof shape);
  buf[0] = '\0';
  if (caption && *caption)
    shmap__cat(buf, len, "%s: ", caption);
  if (!a->mesh) {
    shmap__cat(buf, len, "%s on the host (not sharded)", shape);
    return;
  }
  shmap__spec_format(a->mesh, &a->spec, spec, sizeof spec);
  shmap__cat(buf, len, "%s sharded %s over mesh ", shape, spec);
  for (int k = 0; k < a->mesh->naxes; k++)
    shmap__cat(buf, len, "%s%s=%d", k ? ", " : "", a->mesh->names[k],
               a->mesh->sizes[k]);
}

/* One cell at (x, y): a stripe per device holding it, then its text. */
static void draw_cell(FILE *out, const grid *g, const int *devs, int n,
                      int x, int y, unsigned flags)
{
  int h = g->lines * LINE_H + 2 * PAD;
  int shown = n < SHOW_DEVS ? n : SHOW_DEVS;
  for (int i = 0; i < shown; i++) {
    int x0 = x + g->cell_w * i / shown, x1 = x + g->cell_w * (i + 1) / shown;
    fprintf(out, "<rect class=\"block\" data-device=\"%d\" x=\"%d\" y=\"%d\" "
                 "width=\"%d\" height=\"%d\" fill=\"%s\"/>\n",
            devs[i], x0, y, x1 - x0, h, palette[devs[i] % 8]);
  }
  char text[SHMAP__MSG_MAX];
  for (int line = 0; line < g->lines; line++) {
    cell_line(g, devs, n, line, flags, text, sizeof text);
    fprintf(out, "<text x=\"%d\" y=\"%d\">", x + g->cell_w / 2,
            y + PAD + (line + 1) * LINE_H - 4);
    put_escaped(out, text);
    fputs("</text>\n", out);
  }
}

static void draw_grid(FILE *out, const grid *g, const char *caption, int y,
                      unsigned flags, int *devs)
{
  char text[SHMAP__MSG_MAX];
  caption_text(g->a, caption, text, sizeof text);
  fprintf(out, "<text class=\"caption\" text-anchor=\"start\" x=\"%d\" y=\"%d\">", GAP, y + 20);
  put_escaped(out, text);
  fputs("</text>\n", out);
  y += CAPTION_H;
  int h = g->lines * LINE_H + 2 * PAD;
  for (int64_t r = 0; r < g->rows; r++)
    for (int64_t k = 0; k < g->cols; k++) {
      int x = GAP + (int)k * (g->cell_w + GAP), yy = y + (int)r * (h + GAP);
      if (!g->a->mesh) {
        fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                     "fill=\"#dddddd\"/>\n<text x=\"%d\" y=\"%d\">host</text>\n",
                x, yy, g->cell_w, h, x + g->cell_w / 2, yy + PAD + LINE_H - 4);
        continue;
      }
      int n = cell_devs(g, r * g->cols + k, devs);
      draw_cell(out, g, devs, n, x, yy, flags);
    }
}

/* Checks the arguments; 0 when they can be drawn. */
static int svg_check(const shmap_array *const arrays[], int n, unsigned flags,
                     FILE *out)
{
  if (!arrays || !out)
    return shmap__err(SHMAP_EINVAL, "shmap_array_visualize_svg: NULL argument");
  if (n < 1)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_array_visualize_svg: %d arrays; at least 1 is "
                      "needed", n);
  if (flags & ~(unsigned)SHMAP_SVG_VALUES)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_array_visualize_svg: unknown flags 0x%x",
                      flags & ~(unsigned)SHMAP_SVG_VALUES);
  for (int i = 0; i < n; i++) {
    if (!arrays[i])
      return shmap__err(SHMAP_EINVAL,
                        "shmap_array_visualize_svg: array %d is NULL", i);
    if (arrays[i]->rank > 2)
      return shmap__err(SHMAP_ESHAPE,
                        "shmap_array_visualize_svg: array %d has rank %d and "
                        "cannot be drawn; rank 0, 1 and 2 can",
                        i, arrays[i]->rank);
  }
  return 0;
}

SHMAP_EXTERN int shmap_array_visualize_svg(const shmap_array *const arrays[],
                                           const char *const captions[], int n,
                                           unsigned flags, FILE *out)
{
  int rc = svg_check(arrays, n, flags, out);
  if (rc < 0)
    return rc;
  grid *g = shmap__calloc((size_t)n, sizeof *g);
  int maxdev = 1;
  for (int i = 0; i < n; i++)
    if (arrays[i]->mesh && arrays[i]->mesh->ndev > maxdev)
      maxdev = arrays[i]->mesh->ndev;
  int *devs = shmap__malloc(sizeof(int) * (size_t)maxdev);
  if (!g || !devs)
    rc = shmap__err(SHMAP_ENOMEM, "shmap_array_visualize_svg: out of memory");
  int width = 0, height = 0;
  char text[SHMAP__MSG_MAX];
  for (int i = 0; rc == 0 && i < n; i++) {
    rc = grid_plan(&g[i], arrays[i], flags, devs);
    caption_text(arrays[i], captions ? captions[i] : NULL, text, sizeof text);
    int w = GAP + (int)g[i].cols * (g[i].cell_w + GAP);
    int cw = 2 * GAP + (int)strlen(text) * CHAR_W;
    width = w > width ? w : width;
    width = cw > width ? cw : width;
    height += grid_height(&g[i]);
  }
  if (rc == 0) {
    /* Monospace text of a fixed size, so widths estimated at 8 pixels a
     * character hold in any browser. */
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                 "height=\"%d\" font-family=\"monospace\" font-size=\"13\">\n"
                 "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                 "<g text-anchor=\"middle\">\n",
            width, height + GAP);
    for (int i = 0, y = 0; i < n; y += grid_height(&g[i]), i++)
      draw_grid(out, &g[i], captions ? captions[i] : NULL, y, flags, devs);
    fputs("</g>\n</svg>\n", out);
    if (ferror(out))
      rc = shmap__err(SHMAP_ESYS, "shmap_array_visualize_svg: writing the picture failed");
  }
  for (int i = 0; g && i < n; i++)
    free(g[i].cell_of);
  free(g);
  free(devs);
  return rc;
}
