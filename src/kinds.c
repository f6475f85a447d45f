/* SPDX-License-Identifier: MIT */
/* kinds.c - the lists made from the table of collectives (kinds.h). */
#include "kinds.h"

#define SHMAP__KIND_NAME(id, name, redop) name,
const char *const shmap__kind_names[SHMAP__NKINDS] = {
    "?", SHMAP__KIND_MAP(SHMAP__KIND_NAME)};
#undef SHMAP__KIND_NAME

#define SHMAP__KIND_REDOP(id, name, redop) redop,
static const signed char kind_redops[SHMAP__NKINDS] = {
    -1, SHMAP__KIND_MAP(SHMAP__KIND_REDOP)};
#undef SHMAP__KIND_REDOP

const char *shmap__kind_name(int kind)
{
  return kind > 0 && kind < SHMAP__NKINDS ? shmap__kind_names[kind] : "?";
}

int shmap__kind_redop(int kind)
{
  return kind > 0 && kind < SHMAP__NKINDS ? kind_redops[kind] : -1;
}
