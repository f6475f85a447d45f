/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_badinput.c - one process's bad argument, over processes.
 *
 * Every process works on a mesh "i=4, j=2" (and "k=8" for transfers) with
 * an array A (f32[8,4], P('i', 'j')).  Each case has one process (the
 * "bad" one) pass one bad argument to one call -- a map, a reshard, a
 * transfer, a copy to the host, or a collective inside a map's body -- while
 * the others make the call correctly.  Every process must return from that
 * call within the alarm's limit with the same error code (compared over
 * MPI), a rejection's message naming the bad process and its reason, and
 * the next, correct call must give the right values.
 *
 * First the fixed cases (a bad spec on the last process while the others
 * psum in the body; bad specs to reshard and transfer; a NULL body, unknown
 * flags, nin = -1 and a NULL host pointer; out_specs that differ between
 * processes), then random cases from a seed every process agrees on
 * (SHMAPTEST_BADINPUT_SEED, SHMAPTEST_BADINPUT_CASES).  Run by tests/mpi/run.sh at
 * 1, 2 and 4 processes in the mode of SHMAP_SCHED (both when unset).
 */
#include "../alarm.h"
#include "mpiutil.h"

#include <shmap.h>

#include <signal.h>
#include <stdint.h>
#include <unistd.h>

static int R = 1, me = 0;
static char current[512];

#define CHECK(c, ...)                                                         \
  do {                                                                        \
    if (!(c)) {                                                               \
      fprintf(stderr, "test_mpi_badinput (process %d): %s: ", me, current);   \
      fprintf(stderr, __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                    \
      if (R > 1)                                                              \
        MPI_Abort(MPI_COMM_WORLD, 1);                                         \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static void on_alarm(int sig)
{
  (void)sig;
  tu_alarm_abort("test_mpi_badinput: no return within 60 s: ", current);
}

/* ---- the calls ------------------------------------------------------------ */

enum { MAP, RESHARD, TRANSFER, TO_HOST, COLL, NCALLS };
static const char *const call_names[NCALLS] = {"map", "reshard", "transfer",
                                               "to_host", "collective"};

/* Bad variants per call: a description, the code every process must
 * return, the text the message must hold, and whether the variant is a
 * valid call that differs from the other processes' (SHMAP_EMISMATCH;
 * such cases are skipped with one process), or 2, one that is bad only on
 * a mesh over several processes (skipped with one too). */
typedef struct variant {
  const char *what;
  int code;
  const char *reason;
  int differs;
} variant;

static const variant map_v[] = {
    {"in_specs[0] P('z')", SHMAP_EAXIS, "'z'", 0},
    {"body NULL", SHMAP_EINVAL, "body is NULL", 0},
    {"unknown flags 0x100", SHMAP_EINVAL, "unknown flags 0x100", 0},
    {"nin = -1", SHMAP_EINVAL, "negative count (nin=-1, nout=1)", 0},
    {"out_specs[0] P('z')", SHMAP_EAXIS, "'z'", 0},
    {"in_specs[0] P('i'", SHMAP_ESYNTAX, "in_specs[0]", 0},
    {"manual_axes q", SHMAP_EAXIS, "'q'", 0},
    {"input 0 NULL", SHMAP_EINVAL, "input 0 is NULL", 0},
    {"out_specs[0] P('j') (differs)", SHMAP_EMISMATCH, "different arguments", 1},
    {"in_specs[0] P('i') (differs)", SHMAP_EMISMATCH, "different arguments", 1},
    {"flags SHMAP_NO_CHECK_REP (differs)", SHMAP_EMISMATCH,
     "different arguments", 1},
    {"schedule q.1", SHMAP_EINVAL, "schedule \"q.1\" is not valid", 0},
    {"schedule r.1 (exploring over processes)", SHMAP_EINVAL,
     "an exploring schedule runs every device on one thread, and this "
     "mesh's 8 devices run in", 2},
};
static const variant reshard_v[] = {
    {"spec P('z')", SHMAP_EAXIS, "'z'", 0},
    {"spec NULL", SHMAP_EINVAL, "spec is NULL", 0},
    {"out NULL", SHMAP_EINVAL, "NULL argument", 0},
    {"spec P(None, ('i', 'j'))", SHMAP_ESHAPE, "spec", 0},
    {"spec P('i') (differs)", SHMAP_EMISMATCH, "different arguments", 1},
};
static const variant transfer_v[] = {
    {"spec P('z')", SHMAP_EAXIS, "'z'", 0},
    {"spec NULL", SHMAP_EINVAL, "NULL argument", 0},
    {"out NULL", SHMAP_EINVAL, "NULL argument", 0},
    {"spec P(None) (differs)", SHMAP_EMISMATCH, "different arguments", 1},
};
static const variant to_host_v[] = {
    {"data NULL", SHMAP_EINVAL, "NULL argument", 0},
};
/* Collective mismatches: already every process's SHMAP_EMISMATCH. */
static const variant coll_v[] = {
    {"pmax in place of psum", SHMAP_EMISMATCH, NULL, 1},
    {"psum over 'j' in place of 'i'", SHMAP_EMISMATCH, NULL, 1},
    {"no collective", SHMAP_EMISMATCH, NULL, 1},
};
static const variant *const variants[NCALLS] = {map_v, reshard_v, transfer_v,
                                                to_host_v, coll_v};
static const int nvariants[NCALLS] = {
    sizeof map_v / sizeof map_v[0], sizeof reshard_v / sizeof reshard_v[0],
    sizeof transfer_v / sizeof transfer_v[0],
    sizeof to_host_v / sizeof to_host_v[0], sizeof coll_v / sizeof coll_v[0]};

static shmap_mesh *m1, *m2;
static shmap_array *A;
static float h[8][4];

typedef struct barg {
  int bad; /* process whose devices deviate (-1: none) */
  int variant;
} barg;

static int body(shmap_ctx *ctx, void *arg)
{
  const barg *b = arg;
  shmap_block *x = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!x)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  if (b && b->bad == me) {
    if (b->variant == 0)
      return shmap_pmax(ctx, x, "i");
    if (b->variant == 1)
      return shmap_psum(ctx, x, "j");
    return 0;
  }
  return shmap_psum(ctx, x, "i");
}

static void expect_host(const shmap_array *a, const char *what)
{
  float o[8][4];
  memset(o, 0, sizeof o);
  alarm(60);
  int rc = shmap_array_to_host(a, o);
  alarm(0);
  CHECK(rc == 0, "%s: shmap_array_to_host: %s", what, shmap_errmsg());
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 4; c++)
      CHECK(o[r][c] == h[r][c], "%s: element [%d][%d] = %g, expected %g",
            what, r, c, o[r][c], h[r][c]);
}

/* The call `call` with variant v on this process (v < 0: correct); its
 * code; a result is checked when the call is correct everywhere. */
static int run_call(int call, int v, int bad, int check)
{
  const char *specs_in[1] = {"P('i', 'j')"}, *specs_out[1] = {"P(None, 'j')"};
  shmap_array *in[1] = {A}, *out = NULL;
  barg b = {.bad = -1};
  int rc = 0;
  alarm(60);
  switch (call) {
  case MAP:
  case COLL: {
    shmap_body_fn fn = body;
    int nin = 1;
    unsigned flags = 0;
    shmap_map_opts opts = {0};
    if (call == COLL && v >= 0) {
      b.bad = bad;
      b.variant = v;
    }
    if (call == MAP)
      switch (v) {
      case 0: specs_in[0] = "P('z')"; break;
      case 1: fn = NULL; break;
      case 2: flags = 0x100; break;
      case 3: nin = -1; break;
      case 4: specs_out[0] = "P('z')"; break;
      case 5: specs_in[0] = "P('i'"; break;
      case 6: opts.manual_axes = "q"; break;
      case 7: in[0] = NULL; break;
      case 8: specs_out[0] = "P('j')"; break;
      case 9: specs_in[0] = "P('i')"; break;
      case 10: flags = SHMAP_NO_CHECK_REP; break;
      case 11: opts.schedule = "q.1"; break;
      case 12: opts.schedule = "r.1"; break;
      default: break;
      }
    if (opts.manual_axes || opts.schedule)
      rc = shmap_map_ex(m1, fn, &b, nin, in, specs_in, 1, &out, specs_out,
                        &opts);
    else
      rc = shmap_map_flags(m1, fn, &b, nin, in, specs_in, 1, &out, specs_out,
                           flags);
    if (rc == 0 && check) {
      float o[2][4];
      int rc2 = shmap_array_to_host(out, o);
      CHECK(rc2 == 0, "map's output: shmap_array_to_host: %s", shmap_errmsg());
      for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) {
          float want = h[r][c] + h[2 + r][c] + h[4 + r][c] + h[6 + r][c];
          CHECK(o[r][c] == want, "map: element [%d][%d] = %g, expected %g", r,
                c, o[r][c], want);
        }
    }
    break;
  }
  case RESHARD: {
    const char *spec = "P('j', 'i')";
    shmap_array **po = &out;
    switch (v) {
    case 0: spec = "P('z')"; break;
    case 1: spec = NULL; break;
    case 2: po = NULL; break;
    case 3: spec = "P(None, ('i', 'j'))"; break;
    case 4: spec = "P('i')"; break;
    default: break;
    }
    rc = shmap_array_reshard(po, A, spec);
    if (rc == 0 && check)
      expect_host(out, "reshard");
    break;
  }
  case TRANSFER: {
    const char *spec = "P('k')";
    shmap_array **po = &out;
    switch (v) {
    case 0: spec = "P('z')"; break;
    case 1: spec = NULL; break;
    case 2: po = NULL; break;
    case 3: spec = "P(None)"; break;
    default: break;
    }
    rc = shmap_array_transfer(po, A, m2, spec);
    if (rc == 0 && check)
      expect_host(out, "transfer");
    break;
  }
  case TO_HOST:
    if (v == 0) {
      rc = shmap_array_to_host(A, NULL);
    } else if (check) {
      expect_host(A, "to_host");
    } else {
      float o[8][4];
      rc = shmap_array_to_host(A, o);
    }
    break;
  default:
    break;
  }
  alarm(0);
  shmap_array_destroy(out);
  return rc;
}

/* Every process's code, compared: all must equal `want`. */
static void same_code(int rc, int want)
{
  int *all = calloc((size_t)R, sizeof *all);
  CHECK(all, "out of memory");
  all[0] = rc;
  if (R > 1)
    MPI_Allgather(&rc, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  for (int p = 0; p < R; p++)
    CHECK(all[p] == want, "process %d returned %d (%s), expected %d (%s)%s%s",
          p, all[p], shmap_strerror(all[p]), want, shmap_strerror(want),
          p == me ? ": " : "", p == me ? shmap_errmsg() : "");
  free(all);
}

/* One case: process `bad` passes variant v to `call`; then a correct call
 * `next`. */
static void run_case(int call, int v, int bad, int next)
{
  const variant *var = &variants[call][v];
  snprintf(current, sizeof current,
           "%s: process %d passes %s; then a correct %s (%s)", call_names[call],
           bad, var->what, call_names[next], getenv("SHMAP_SCHED"));
  if (R == 1 && var->differs)
    return; /* nothing to differ from */
  int rc = run_call(call, me == bad ? v : -1, bad, 0);
  int want = var->code;
  same_code(rc, want);
  const char *msg = shmap_errmsg();
  if (want && var->reason) {
    CHECK(strstr(msg, var->reason), "message does not say \"%s\": %s",
          var->reason, msg);
    char who[64];
    if (R > 1 && var->differs != 1) {
      snprintf(who, sizeof who, "process %d (host ", bad);
      CHECK(strstr(msg, who) && strstr(msg, "rejected the call"),
            "message does not name the rejecting %s...): %s", who, msg);
    }
    if (R > 1 && var->differs == 1) {
      snprintf(who, sizeof who, "process %d (host ", bad ? bad : 1);
      CHECK(strstr(msg, "process 0 (host ") && strstr(msg, who),
            "message does not name process 0 and %s...): %s", who, msg);
    }
    CHECK(same_everywhere_of(R, msg), "not every process has the message %s",
          msg);
  }
  snprintf(current, sizeof current,
           "after %s: process %d passes %s: a correct %s (%s)",
           call_names[call], bad, var->what, call_names[next],
           getenv("SHMAP_SCHED"));
  rc = run_call(next, -1, -1, 1);
  same_code(rc, 0);
}

/* A mesh that process `bad` rejects (a duplicate axis) while the others
 * pass a good one: every process fails with its reason; then a new mesh
 * (whose serial number must agree everywhere), an array on it and a map on
 * an older mesh work. */
static void created_rejected(int bad, const char *mode)
{
  snprintf(current, sizeof current,
           "shmap_mesh_create: process %d passes a duplicate axis (%s)", bad,
           mode);
  shmap_mesh *m = NULL;
  alarm(60);
  int rc = shmap_mesh_create(&m, me == bad ? "i=4, i=2" : "i=4, j=2");
  alarm(0);
  same_code(rc, SHMAP_EAXIS);
  const char *msg = shmap_errmsg();
  CHECK(m == NULL, "a mesh was returned");
  CHECK(strstr(msg, "duplicate axis name 'i' in mesh \"i=4, i=2\""),
        "message does not give the reason: %s", msg);
  if (R > 1) {
    char who[64];
    snprintf(who, sizeof who, "shmap_mesh_create: process %d (host ", bad);
    CHECK(strstr(msg, who) && strstr(msg, "rejected the call"),
          "message does not name the rejecting %s...): %s", who, msg);
  }
  CHECK(same_everywhere_of(R, msg), "not every process has the message %s",
        msg);
  snprintf(current, sizeof current,
           "after a mesh process %d rejected: a new mesh, an array on it, a "
           "map (%s)", bad, mode);
  alarm(60);
  CHECK(shmap_mesh_create(&m, "p=2, q=4") == 0, "%s", shmap_errmsg());
  shmap_array *a = NULL;
  CHECK(shmap_array_from_host_sharded(&a, m, "P('q', 'p')", SHMAP_F32, 2,
                                      (int64_t[]){8, 4}, h) == 0,
        "%s", shmap_errmsg());
  alarm(0);
  expect_host(a, "an array on the mesh after the rejected one");
  shmap_array_destroy(a);
  same_code(run_call(MAP, -1, -1, 1), 0);
  alarm(60);
  CHECK(shmap_mesh_destroy(m) == 0, "%s", shmap_errmsg());
  alarm(0);
}

static uint64_t rng;
static int rnd(int n)
{
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (int)((rng >> 33) % (uint64_t)n);
}

static void run_mode(const char *mode)
{
  CHECK(setenv("SHMAP_SCHED", mode, 1) == 0, "setenv");
  snprintf(current, sizeof current, "setting up (%s)", mode);
  CHECK(shmap_mesh_create(&m1, "i=4, j=2") == 0, "%s", shmap_errmsg());
  CHECK(shmap_mesh_create(&m2, "k=8") == 0, "%s", shmap_errmsg());
  CHECK(shmap_array_from_host_sharded(&A, m1, "P('i', 'j')", SHMAP_F32, 2,
                                      (int64_t[]){8, 4}, h) == 0,
        "%s", shmap_errmsg());
  int last = R - 1;
  /* The cases the library got wrong: a bad spec on the last process while
   * the others psum in the body; bad specs to reshard and transfer; bad
   * arguments followed by a correct call; out_specs that differ; a bad
   * schedule, and one over processes. */
  static const int fixed[][3] = {
      {MAP, 0, MAP},      {MAP, 0, TO_HOST},   {RESHARD, 0, RESHARD},
      {TRANSFER, 0, TRANSFER}, {MAP, 1, MAP},   {MAP, 2, MAP},
      {MAP, 3, MAP},      {TO_HOST, 0, TO_HOST}, {TO_HOST, 0, MAP},
      {MAP, 8, MAP},      {COLL, 0, MAP},      {MAP, 11, MAP},
      {MAP, 12, MAP},
  };
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    run_case(fixed[i][0], fixed[i][1], last, fixed[i][2]);
  created_rejected(last, mode);
  /* Random cases from a seed every process has. */
  const char *env = getenv("SHMAPTEST_BADINPUT_CASES");
  int ncases = env && *env ? atoi(env) : 40;
  env = getenv("SHMAPTEST_BADINPUT_SEED");
  unsigned long long seed = env && *env ? strtoull(env, NULL, 0) : 20261127;
  if (R > 1)
    MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  if (me == 0)
    fprintf(stderr, "test_mpi_badinput (%s, %d process%s): %d random cases, "
                    "SHMAPTEST_BADINPUT_SEED=%llu\n",
            mode, R, R == 1 ? "" : "es", ncases, seed);
  rng = seed * 2654435761u + 1;
  for (int i = 0; i < ncases; i++) {
    int call = rnd(NCALLS);
    int v = rnd(nvariants[call]);
    int bad = rnd(R);
    int next = rnd(NCALLS - 1); /* a correct call: not a collective's */
    run_case(call, v, bad, next);
  }
  shmap_array_destroy(A);
  CHECK(shmap_mesh_destroy(m2) == 0, "%s", shmap_errmsg());
  CHECK(shmap_mesh_destroy(m1) == 0, "%s", shmap_errmsg());
}

int main(void)
{
  R = shmap_process_count();
  me = shmap_process_rank();
  if (R < 1 || me < 0) {
    fprintf(stderr, "test_mpi_badinput: %s\n", shmap_errmsg());
    return 1;
  }
  signal(SIGALRM, on_alarm);
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 4; c++)
      h[r][c] = (float)(r * 4 + c);
  static const char *const modes[2] = {"threads", "fibers"};
  for (int k = 0; k < 2; k++) {
    if (!tu_mode_wanted(modes[k]))
      continue;
    run_mode(modes[k]);
  }
  if (me == 0)
    printf("test_mpi_badinput: %d process%s, all passed\n", R,
           R == 1 ? "" : "es");
  return 0;
}
