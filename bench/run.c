/* SPDX-License-Identifier: MIT */
/*
 * run.c - libshmap's benchmark: the collectives against a memory roofline,
 * a hand-written OpenMP psum and Open MPI, in one run.  BENCHMARKS.md says
 * what each column means and how it is measured.
 *
 * Output: a header line starting with '#', then one line per case,
 *   op=psum P=8 bytes=4194304 shmap_us=... omp_us=... mpi_us=... roofline_us=...
 *       sol_us=... shmap_sol_x=... (the speed of light: sol.c)
 * with medians in microseconds and NA where a column does not apply.
 * Progress goes to stderr.
 *
 * `bytes` is the per-device size of the full f32 buffer of the collective:
 * the input of psum, psum_scatter, all_to_all and ppermute, and the output
 * of all_gather (whose input is bytes/P).
 */
#include <shmap.h>

#include "cmatmul.h"
#include "sol.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef BENCH_MPIRUN
#define BENCH_MPIRUN ""
#endif
#ifndef BENCH_MPI_HELPER
#define BENCH_MPI_HELPER "bench/mpi_bench"
#endif
#ifndef BENCH_TRANSPORT_HELPER
#define BENCH_TRANSPORT_HELPER "bench/transport"
#endif

enum { OP_PSUM, OP_PSUM_SCATTER, OP_ALL_GATHER, OP_ALL_TO_ALL, OP_PPERMUTE,
       OP_EMPTY, OP_PSUM_BF16, OP_PSUM_F16, NOPS };
static const char *const op_names[NOPS] = {
    "psum", "psum_scatter", "all_gather", "all_to_all", "ppermute", "empty",
    "psum_bf16", "psum_f16"};
/* Ops the Open MPI helper runs too (it has no 16-bit float types). */
#define MPI_OPS ((1 << (OP_EMPTY + 1)) - 1)
/* psum of bf16 and f16 runs on as many elements as the f32 psum of the
 * same size, so its lines (half the bytes) sit beside f32's. */
static int op_half(int op)
{
  return op == OP_PSUM_BF16 || op == OP_PSUM_F16;
}

#define MAXLIST 32
/* The process sweep's sizes per device: 64 floats, which the transport's
 * two levels take in one exchange, and 1024, above that exchange's bound
 * in every group the sweep makes. */
#define PSW_SIZES 2
static const size_t psw_bytes[PSW_SIZES] = {256, 4096};
#define NA NAN

/* ---- options ------------------------------------------------------------ */

static struct {
  int quick;
  size_t sizes[MAXLIST];
  int nsizes;
  int ps[MAXLIST];
  int nps;
  int sweep[MAXLIST]; /* P of the scaling sweep (psum and all_gather) */
  int nsweep;
  int ops; /* bit mask */
  int reps;
  double target_ms;
  int contended;
  int mpi, omp, verbose;
  const char *mpirun, *helper, *thelper;
  int tr_r[MAXLIST], tr_d[MAXLIST]; /* --transport layouts R x D */
  int ntr;
  int psweep[MAXLIST]; /* --proc-sweep: group sizes over 2 and 4 processes */
  int npsweep;
  int cm_n[MAXLIST]; /* matrix sides of the collective matmul cases */
  int ncm;
  /* --sweep-child=P: this process measures one P of the scaling sweep in
   * the mode SHMAP_SCHED names (see "The scaling sweep"); 0 otherwise. */
  int sweep_child;
} opt;

static void die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "bench/run: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static void progress(const char *fmt, ...)
{
  if (!opt.verbose)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[bench] ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

/*
 * Numbers are parsed strictly: the whole text must be the number (no
 * leading blanks or signs where none make sense, no trailing characters),
 * within range, so that a typo is an error instead of a silent 0.
 */
static long parse_long(const char *what, const char *s, long lo, long hi)
{
  char *end;
  errno = 0;
  /* strtol would skip leading blanks; a number starts with a sign or a
   * digit. */
  bool starts = *s == '-' || (*s >= '0' && *s <= '9');
  long v = starts ? strtol(s, &end, 10) : (end = (char *)s, 0);
  if (end == s || *end)
    die("%s: '%s' is not a whole number", what, s);
  if (errno == ERANGE || v < lo || v > hi)
    die("%s: %s is out of range (%ld to %ld)", what, s, lo, hi);
  return v;
}

static double parse_positive(const char *what, const char *s, double hi)
{
  char *end;
  errno = 0;
  bool starts = *s == '-' || *s == '.' || (*s >= '0' && *s <= '9');
  double v = starts ? strtod(s, &end) : (end = (char *)s, 0);
  /* Decimal only: strtod would also take hexadecimal and "inf". */
  if (end == s || *end || isnan(v) || strpbrk(s, "xXpP"))
    die("%s: '%s' is not a number", what, s);
  if (errno == ERANGE || !(v > 0) || v > hi)
    die("%s: %s is out of range (more than 0, at most %g)", what, s, hi);
  return v;
}

/* "4K", "16M", "256", "1MiB" -> bytes. */
static size_t parse_size(const char *what, const char *s)
{
  char *end;
  errno = 0;
  unsigned long long v =
      *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : (end = (char *)s, 0);
  if (errno || end == s)
    die("%s: '%s' is not a size (bytes, with an optional K, M or G)", what, s);
  int shift = 0;
  if (*end == 'k' || *end == 'K')
    shift = 10, end++;
  else if (*end == 'm' || *end == 'M')
    shift = 20, end++;
  else if (*end == 'g' || *end == 'G')
    shift = 30, end++;
  if (shift && (*end == 'i' || *end == 'I'))
    end++;
  if (*end == 'b' || *end == 'B')
    end++;
  if (*end)
    die("%s: '%s' is not a size (bytes, with an optional K, M or G)", what, s);
  if (v > ((unsigned long long)1 << 40) >> shift)
    die("%s: %s is too large (at most 1 TiB)", what, s);
  return (size_t)(v << shift);
}

/* Comma-separated list; returns the count. */
static int parse_list(const char *s, const char *what, size_t out[],
                      int is_size)
{
  int n = 0;
  char buf[1024];
  if (strlen(s) >= sizeof buf)
    die("%s: list too long", what);
  snprintf(buf, sizeof buf, "%s", s);
  if (!*buf || buf[strlen(buf) - 1] == ',' || *buf == ',' || strstr(buf, ",,"))
    die("%s: '%s' is not a comma-separated list", what, s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (n == MAXLIST)
      die("%s: more than %d values", what, MAXLIST);
    out[n++] = is_size ? parse_size(what, tok)
                       : (size_t)parse_long(what, tok, 1, SHMAP_MAX_DEVICES);
  }
  return n;
}

static int parse_ints(const char *s, const char *what, int out[])
{
  size_t tmp[MAXLIST];
  if (strcmp(s, "none") == 0)
    return 0;
  int n = parse_list(s, what, tmp, 0);
  for (int i = 0; i < n; i++)
    out[i] = (int)tmp[i];
  return n;
}

static void usage(FILE *f)
{
  fprintf(f,
          "usage: bench/run [options]\n"
          "  --quick             short run: sizes 256,64K,1M, 3 samples, 5 ms "
          "each,\n"
          "                      sweep 16,256,1024\n"
          "  --sizes=LIST        per-device bytes, e.g. 256,4K,64K,1M,4M,16M\n"
          "  -P, --P=LIST        device counts, e.g. 2,4,8\n"
          "  --sweep=LIST|none   device counts of the psum/all_gather scaling "
          "sweep\n"
          "                      (default 2,4,...,1024); each P runs in both "
          "scheduling\n"
          "                      modes (sched=threads, sched=fibers), each in a "
          "fresh\n"
          "                      process, whose lines also give "
          "peak_kib_per_device:\n"
          "                      its peak resident memory (VmHWM) up to the "
          "end of the\n"
          "                      case less its resident memory before the "
          "mesh existed\n"
          "                      (VmRSS), over P, in KiB\n"
          "  --ops=LIST          psum,psum_scatter,all_gather,all_to_all,"
          "ppermute,empty,\n"
          "                      psum_bf16,psum_f16 (the f32 sizes' element "
          "counts)\n"
          "  --reps=K            samples per case, 1 to 64 (median reported)\n"
          "  --target-ms=T       length of one sample in milliseconds\n"
          "  --contended         measure every case a second time while a busy "
          "process\n"
          "                      of the benchmark's own takes one core; print "
          "the ratio\n"
          "  --cmatmul=LIST|none matrix sides N of the collective matmul "
          "cases\n"
          "                      (default 128,256,512; --quick 128,256)\n"
          "  --transport=LIST|none  layouts RxD (R processes of D devices) of\n"
          "                      libshmap over MPI beside raw MPI on R*D ranks\n"
          "                      (default 2x1,4x1,2x2,2x4 when MPI was found)\n"
          "  --proc-sweep=LIST|none  device counts of a psum of 64 and of 1024\n"
          "                      floats over one group spread over 2 and 4\n"
          "                      processes, e.g.\n"
          "                      64,128,256,512,1024 (default none)\n"
          "  --no-mpi, --no-omp  skip a comparison column (NA)\n"
          "  --quiet             no progress on stderr\n"
          "  -h, --help          this text\n"
          "Options take their value as --opt=V or --opt V.\n"
          "environment: BENCH_MPIRUN, BENCH_MPI_HELPER, BENCH_TRANSPORT_HELPER "
          "override the\n"
          "mpirun, bench/mpi_bench and bench/transport paths\n");
}

static void parse_args(int argc, char **argv)
{
  static const size_t full_sizes[] = {256, 4 << 10, 64 << 10, 1 << 20,
                                      4 << 20, 16 << 20};
  static const size_t quick_sizes[] = {256, 64 << 10, 1 << 20};
  enum { O_QUICK = 256, O_SIZES, O_P, O_SWEEP, O_OPS, O_REPS, O_TARGET,
         O_CONTENDED, O_NOMPI, O_NOOMP, O_QUIET, O_CMATMUL, O_TRANSPORT,
         O_PSWEEP, O_SWEEP_CHILD };
  static const struct option longopts[] = {
      {"quick", no_argument, NULL, O_QUICK},
      {"sizes", required_argument, NULL, O_SIZES},
      {"P", required_argument, NULL, O_P},
      {"sweep", required_argument, NULL, O_SWEEP},
      {"ops", required_argument, NULL, O_OPS},
      {"reps", required_argument, NULL, O_REPS},
      {"target-ms", required_argument, NULL, O_TARGET},
      {"contended", no_argument, NULL, O_CONTENDED},
      {"no-mpi", no_argument, NULL, O_NOMPI},
      {"no-omp", no_argument, NULL, O_NOOMP},
      {"quiet", no_argument, NULL, O_QUIET},
      {"cmatmul", required_argument, NULL, O_CMATMUL},
      {"transport", required_argument, NULL, O_TRANSPORT},
      {"proc-sweep", required_argument, NULL, O_PSWEEP},
      {"sweep-child", required_argument, NULL, O_SWEEP_CHILD},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *sizes = NULL, *ps = NULL, *sweep = NULL, *ops = NULL;
  const char *cmatmul = NULL, *transport = NULL, *psweep = NULL;
  opt.reps = -1;
  opt.target_ms = -1;
  opt.mpi = opt.omp = opt.verbose = 1;
  opterr = 0; /* our own messages */
  int c;
  while ((c = getopt_long(argc, argv, ":hP:", longopts, NULL)) != -1) {
    switch (c) {
    case O_QUICK: opt.quick = 1; break;
    case O_SIZES: sizes = optarg; break;
    case 'P':
    case O_P: ps = optarg; break;
    case O_SWEEP: sweep = optarg; break;
    case O_OPS: ops = optarg; break;
    case O_REPS: opt.reps = (int)parse_long("--reps", optarg, 1, 64); break;
    case O_TARGET:
      opt.target_ms = parse_positive("--target-ms", optarg, 60e3);
      break;
    case O_CONTENDED: opt.contended = 1; break;
    case O_NOMPI: opt.mpi = 0; break;
    case O_NOOMP: opt.omp = 0; break;
    case O_QUIET: opt.verbose = 0; break;
    case O_CMATMUL: cmatmul = optarg; break;
    case O_TRANSPORT: transport = optarg; break;
    case O_PSWEEP: psweep = optarg; break;
    case O_SWEEP_CHILD:
      opt.sweep_child = (int)parse_long("--sweep-child", optarg, 1, 1 << 20);
      break;
    case 'h': usage(stdout); exit(0);
    case ':':
      usage(stderr);
      die("%s needs a value", argv[optind - 1]);
      break;
    default:
      usage(stderr);
      if (optopt && optopt < 256)
        die("unknown option '-%c'", optopt);
      die("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) {
    usage(stderr);
    die("unexpected argument '%s'", argv[optind]);
  }
  if (sizes) {
    opt.nsizes = parse_list(sizes, "--sizes", opt.sizes, 1);
  } else {
    const size_t *src = opt.quick ? quick_sizes : full_sizes;
    opt.nsizes = opt.quick ? 3 : 6;
    memcpy(opt.sizes, src, (size_t)opt.nsizes * sizeof *src);
  }
  for (int i = 0; i < opt.nsizes; i++)
    if (opt.sizes[i] < 4 || opt.sizes[i] % 4)
      die("--sizes: %zu is not a whole number of f32 elements", opt.sizes[i]);
  if (ps) {
    opt.nps = parse_ints(ps, "--P", opt.ps);
  } else {
    opt.nps = 3;
    opt.ps[0] = 2, opt.ps[1] = 4, opt.ps[2] = 8;
  }
  if (sweep) {
    opt.nsweep = parse_ints(sweep, "--sweep", opt.sweep);
  } else if (opt.quick) {
    opt.nsweep = 3;
    opt.sweep[0] = 16, opt.sweep[1] = 256, opt.sweep[2] = 1024;
  } else {
    for (int p = 2; p <= 1024; p *= 2)
      opt.sweep[opt.nsweep++] = p;
  }
  if (ops) {
    char buf[512];
    if (strlen(ops) >= sizeof buf)
      die("--ops: list too long");
    snprintf(buf, sizeof buf, "%s", ops);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
      int k;
      for (k = 0; k < NOPS && strcmp(tok, op_names[k]); k++)
        ;
      if (k == NOPS)
        die("--ops: unknown op '%s' (psum, psum_scatter, all_gather, "
            "all_to_all, ppermute, empty)", tok);
      opt.ops |= 1 << k;
    }
    if (!opt.ops)
      die("--ops: empty list");
  } else {
    opt.ops = (1 << NOPS) - 1;
  }
  if (cmatmul) {
    opt.ncm = parse_ints(cmatmul, "--cmatmul", opt.cm_n);
  } else {
    opt.ncm = opt.quick ? 2 : 3;
    opt.cm_n[0] = 128, opt.cm_n[1] = 256, opt.cm_n[2] = 512;
  }
  if (opt.reps < 1)
    opt.reps = opt.quick ? 3 : 9;
  if (opt.target_ms <= 0)
    opt.target_ms = opt.quick ? 5 : 30;
  const char *env = getenv("BENCH_MPIRUN");
  opt.mpirun = env && *env ? env : BENCH_MPIRUN;
  env = getenv("BENCH_MPI_HELPER");
  opt.helper = env && *env ? env : BENCH_MPI_HELPER;
  env = getenv("BENCH_TRANSPORT_HELPER");
  opt.thelper = env && *env ? env : BENCH_TRANSPORT_HELPER;
  bool can_transport = *opt.mpirun && access(opt.helper, X_OK) == 0 &&
                       access(opt.thelper, X_OK) == 0;
  if (!*opt.mpirun || access(opt.helper, X_OK) != 0)
    opt.mpi = 0;
  if (transport && strcmp(transport, "none") == 0) {
    opt.ntr = 0;
  } else if (transport) {
    char buf[512];
    if (strlen(transport) >= sizeof buf)
      die("--transport: list too long");
    snprintf(buf, sizeof buf, "%s", transport);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
      int r, d;
      char end;
      if (sscanf(tok, "%dx%d%c", &r, &d, &end) != 2 || r < 1 || d < 1 ||
          r > 64 || d > 64 || opt.ntr == MAXLIST)
        die("--transport: '%s' is not a layout RxD (e.g. 2x4)", tok);
      opt.tr_r[opt.ntr] = r, opt.tr_d[opt.ntr++] = d;
    }
    if (!can_transport)
      die("--transport needs mpirun, %s and %s (libshmap built with MPI)",
          opt.helper, opt.thelper);
  }
  if (psweep && strcmp(psweep, "none") != 0) {
    opt.npsweep = parse_ints(psweep, "--proc-sweep", opt.psweep);
    for (int i = 0; i < opt.npsweep; i++)
      if (opt.psweep[i] % 4)
        die("--proc-sweep: %d devices do not divide over 4 processes",
            opt.psweep[i]);
    if (!can_transport)
      die("--proc-sweep needs mpirun and %s (libshmap built with MPI)",
          opt.thelper);
  }
  if (!transport && can_transport) {
    static const int r[] = {2, 4, 2, 2}, d[] = {1, 1, 2, 4};
    for (int i = 0; i < 4; i++)
      opt.tr_r[i] = r[i], opt.tr_d[i] = d[i];
    opt.ntr = 4;
  }
}

/* ---- helpers ------------------------------------------------------------- */

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Three significant digits, at most three decimals, or NA. */
static const char *fmt_us(double v, char *buf, size_t n)
{
  if (isnan(v))
    snprintf(buf, n, "NA");
  else if (v >= 100)
    snprintf(buf, n, "%.0f", v);
  else if (v >= 10)
    snprintf(buf, n, "%.1f", v);
  else if (v >= 1)
    snprintf(buf, n, "%.2f", v);
  else
    snprintf(buf, n, "%.3f", v);
  return buf;
}

/* Three significant digits (bandwidths in GB/s), or NA. */
static const char *fmt_g(double v, char *buf, size_t n)
{
  if (isnan(v))
    snprintf(buf, n, "NA");
  else
    snprintf(buf, n, "%.3g", v);
  return buf;
}

static void *xalloc(size_t bytes)
{
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p)
    die("out of memory (%zu bytes)", bytes);
  return p;
}

/*
 * Repetition count for a sample of about target_ms: `sample(R)` returns
 * the time of one repetition (us) measured over R back-to-back ones.
 * Grows R tenfold until a calibration sample lasts a fifth of the target,
 * and gives at least min_calls (1 but in the scaling sweep's psum, see
 * there).
 */
typedef double (*sample_fn)(void *ctx, int R);
static int min_calls = 1;

static int calibrate(sample_fn sample, void *ctx)
{
  double target = opt.target_ms * 1e3;
  int r = 1;
  for (;;) {
    double per = sample(ctx, r);
    if (per * r >= target / 5 || r >= 100000) {
      double want = per > 0 ? target / per : 100000;
      return want < min_calls ? min_calls : want > 1e6 ? 1000000 : (int)want;
    }
    r *= 10;
  }
}

/* Median over opt.reps samples of about target_ms each. */
static double measure(sample_fn sample, void *ctx)
{
  int R = calibrate(sample, ctx);
  double v[64];
  int k = opt.reps < 64 ? opt.reps : 64;
  for (int i = 0; i < k; i++)
    v[i] = sample(ctx, R);
  return median(v, k);
}

/* ---- a busy process, for --contended ------------------------------------- */

/*
 * The contended run measures each case again while a child process of the
 * benchmark (a shell loop, exec'd) spins on one core's worth of CPU time,
 * as a compiler or a browser tab would on a laptop.  It is not pinned: the
 * kernel places it wherever it likes, as it would any other process.  It
 * is started before and killed after each contended sample series, so the
 * quiet numbers never see it.
 */
static pid_t busy_pid;

/* fork() with the output flushed first (so that the child does not write
 * it again); dies if it fails. */
static pid_t fork_flushed(void)
{
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    die("fork: %s", strerror(errno));
  return pid;
}

static void busy_start(void)
{
  pid_t pid = fork_flushed();
  if (pid == 0) {
    /* A program of its own: a forked copy of the benchmark would share
     * its pages copy-on-write, and the benchmark's writes to them would
     * then wait while the kernel splits or copies the pages (huge ones,
     * where blocks have them). */
    execl("/bin/sh", "sh", "-c", "while :; do :; done", (char *)NULL);
    _exit(127);
  }
  busy_pid = pid;
}

static void busy_stop(void)
{
  if (busy_pid > 0) {
    kill(busy_pid, SIGKILL);
    waitpid(busy_pid, NULL, 0);
    busy_pid = 0;
  }
}

static void busy_atexit(void) { busy_stop(); }

/* Median of a case, and with --contended its median with the busy process
 * running (NA otherwise). */
static double measure_both(sample_fn sample, void *ctx, double *busy)
{
  double quiet = measure(sample, ctx);
  *busy = NA;
  if (opt.contended) {
    busy_start();
    *busy = measure(sample, ctx);
    busy_stop();
  }
  return quiet;
}

/* ---- the memory roofline --------------------------------------------------- */

/* Bytes per microsecond read+written by 2 threads each copying n bytes
 * between two buffers of its own; best of `runs`. */
static double measure_bandwidth(size_t n, int runs)
{
  double best = 0;
  char *buf[2][2];
  for (int t = 0; t < 2; t++)
    for (int k = 0; k < 2; k++)
      buf[t][k] = xalloc(n);
#pragma omp parallel num_threads(2)
  {
    int t = omp_get_thread_num();
    /* First touch by the owner. */
    memset(buf[t][0], 1, n);
    memset(buf[t][1], 2, n);
    for (int r = 0; r < runs; r++) {
      double t0 = 0;
#pragma omp barrier
#pragma omp master
      t0 = now_us();
      memcpy(buf[t][r & 1], buf[t][!(r & 1)], n);
#pragma omp barrier
#pragma omp master
      {
        double bw = 4.0 * (double)n / (now_us() - t0);
        if (bw > best)
          best = bw;
      }
    }
  }
  for (int t = 0; t < 2; t++)
    for (int k = 0; k < 2; k++)
      free(buf[t][k]);
  return best;
}

/* Minimum bytes read + written by op over P devices of n bytes each. */
static double min_traffic(int op, int P, size_t n)
{
  double pn = (double)P * (double)n;
  switch (op) {
  case OP_PSUM_SCATTER: return pn + (double)n;
  case OP_EMPTY: return NA;
  default: return 2 * pn; /* psum, all_gather, all_to_all, ppermute */
  }
}

/* ---- libshmap ----------------------------------------------------------------- */

typedef struct sjob {
  int op, P, R, K;
  int64_t len;      /* elements of each device's input block */
  double *t0, *t1;  /* [K][P] sample start and end per device */
  int (*pairs)[2];  /* ring shift by one */
} sjob;

static int one_op(shmap_ctx *ctx, const sjob *j, shmap_block *x)
{
  shmap_block *out = NULL;
  int rc;
  switch (j->op) {
  case OP_PSUM:
  case OP_PSUM_BF16:
  case OP_PSUM_F16:
    return shmap_psum(ctx, x, "i");
  case OP_PPERMUTE:
    return shmap_ppermute(ctx, x, "i", j->P, (const int(*)[2])j->pairs);
  case OP_PSUM_SCATTER:
    rc = shmap_psum_scatter(ctx, x, "i", 0, 1, &out);
    break;
  case OP_ALL_GATHER:
    rc = shmap_all_gather(ctx, x, "i", 0, 1, &out);
    break;
  case OP_ALL_TO_ALL:
    rc = shmap_all_to_all(ctx, x, "i", 0, 0, 1, &out);
    break;
  default:
    return shmap_fail(ctx, "bad op %d", j->op);
  }
  /* Results of shape-changing collectives are freed at once, as a loop
   * that uses them and moves on would; they are not kept R times. */
  if (rc == 0)
    rc = shmap_block_free(ctx, out);
  return rc;
}

/*
 * One warm-up call, then K samples: a psum of one float lines the devices
 * up, and each device times R back-to-back calls.
 */
static int coll_body(shmap_ctx *ctx, void *arg)
{
  const sjob *j = arg;
  int d = shmap_ctx_device(ctx);
  shmap_dtype dt = j->op == OP_PSUM_BF16  ? SHMAP_BF16
                   : j->op == OP_PSUM_F16 ? SHMAP_F16
                                          : SHMAP_F32;
  shmap_block *x = shmap_block_alloc(ctx, dt, 1, &j->len);
  shmap_block *bar = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){1});
  if (!x || !bar)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  for (int64_t e = 0; e < j->len; e++) {
    float f = (float)((e + d) % 7) * 0.125f;
    if (dt == SHMAP_F32)
      ((float *)x->data)[e] = f;
    else
      ((uint16_t *)x->data)[e] =
          dt == SHMAP_BF16 ? shmap_f32_to_bf16(f) : shmap_f32_to_f16(f);
  }
  int rc = one_op(ctx, j, x);
  for (int k = 0; k < j->K && rc == 0; k++) {
    if ((rc = shmap_psum(ctx, bar, "i")))
      break;
    j->t0[k * j->P + d] = now_us();
    for (int r = 0; r < j->R && rc == 0; r++)
      rc = one_op(ctx, j, x);
    j->t1[k * j->P + d] = now_us();
  }
  return rc;
}

static int empty_body(shmap_ctx *ctx, void *arg)
{
  (void)ctx;
  (void)arg;
  return 0;
}

typedef struct scase {
  shmap_mesh *mesh;
  int op, P;
  size_t bytes;
  int (*pairs)[2];
} scase;

static void map_or_die(int rc, const char *what)
{
  if (rc)
    die("%s failed: %s: %s", what, shmap_strerror(rc), shmap_errmsg());
}

/* Time of one repetition: from the first device starting the sample to the
 * last one finishing it, divided by R. */
static double shmap_sample(void *arg, int R)
{
  scase *c = arg;
  if (c->op == OP_EMPTY) {
    double t0 = now_us();
    for (int r = 0; r < R; r++)
      map_or_die(shmap_map(c->mesh, empty_body, NULL, 0, NULL, NULL, 0, NULL,
                           NULL),
                 "shmap_map(empty)");
    return (now_us() - t0) / R;
  }
  double t0[MAXLIST], t1[MAXLIST];
  double *b0 = c->P <= MAXLIST ? t0 : xalloc(sizeof(double) * (size_t)c->P);
  double *b1 = c->P <= MAXLIST ? t1 : xalloc(sizeof(double) * (size_t)c->P);
  size_t n = c->bytes / (op_half(c->op) ? 2 : 4);
  sjob j = {.op = c->op, .P = c->P, .R = R, .K = 1,
            .len = (int64_t)(c->op == OP_ALL_GATHER ? n / (size_t)c->P : n),
            .t0 = b0, .t1 = b1, .pairs = c->pairs};
  map_or_die(shmap_map(c->mesh, coll_body, &j, 0, NULL, NULL, 0, NULL, NULL),
             op_names[c->op]);
  double lo = b0[0], hi = b1[0];
  for (int d = 1; d < c->P; d++) {
    lo = b0[d] < lo ? b0[d] : lo;
    hi = b1[d] > hi ? b1[d] : hi;
  }
  if (b0 != t0) {
    free(b0);
    free(b1);
  }
  return (hi - lo) / R;
}

/* ---- hand-written OpenMP ------------------------------------------------------ */

typedef struct ocase {
  int op, P;
  size_t n;     /* floats per thread */
  float **buf;  /* P buffers of n floats, one per thread */
  float *res;   /* shared result */
} ocase;

/* The straightforward allreduce: each thread sums its chunk of everybody's
 * buffers into a shared result, then copies the whole result back into its
 * own buffer; barriers between the phases. */
static double omp_sample(void *arg, int R)
{
  ocase *c = arg;
  double t0 = 0, t1 = 0;
  int P = c->P, bad = 0;
  if (c->op == OP_EMPTY) {
    t0 = now_us();
    for (int r = 0; r < R; r++) {
#pragma omp parallel num_threads(P)
      {
        __asm__ __volatile__("" ::: "memory");
      }
    }
    return (now_us() - t0) / R;
  }
  size_t n = c->n;
#pragma omp parallel num_threads(P)
  {
    int t = omp_get_thread_num();
    if (omp_get_num_threads() != P)
      bad = 1;
    size_t chunk = (n + (size_t)P - 1) / (size_t)P;
    size_t lo = chunk * (size_t)t < n ? chunk * (size_t)t : n;
    size_t hi = lo + chunk < n ? lo + chunk : n;
    float *restrict res = c->res;
#pragma omp barrier
#pragma omp master
    t0 = now_us();
    for (int r = 0; r < R && !bad; r++) {
      const float *b0 = c->buf[0];
      for (size_t i = lo; i < hi; i++)
        res[i] = b0[i];
      for (int p = 1; p < P; p++) {
        const float *restrict bp = c->buf[p];
        for (size_t i = lo; i < hi; i++)
          res[i] += bp[i];
      }
#pragma omp barrier
      memcpy(c->buf[t], res, n * sizeof(float));
#pragma omp barrier
    }
#pragma omp master
    t1 = now_us();
  }
  if (bad)
    die("OpenMP gave fewer than %d threads", P);
  return (t1 - t0) / R;
}

static double omp_measure(int op, int P, size_t bytes, double *busy)
{
  ocase c = {.op = op, .P = P, .n = bytes / 4};
  if (op == OP_EMPTY)
    return measure_both(omp_sample, &c, busy);
  c.buf = xalloc(sizeof(float *) * (size_t)P);
  for (int p = 0; p < P; p++)
    c.buf[p] = xalloc(c.n * sizeof(float));
  c.res = xalloc(c.n * sizeof(float));
#pragma omp parallel num_threads(P)
  {
    int t = omp_get_thread_num();
    if (t < P) { /* first touch by the owner */
      for (size_t i = 0; i < c.n; i++)
        c.buf[t][i] = (float)((i + (size_t)t) % 7) * 0.125f;
      size_t chunk = (c.n + (size_t)P - 1) / (size_t)P;
      size_t lo = chunk * (size_t)t < c.n ? chunk * (size_t)t : c.n;
      size_t hi = lo + chunk < c.n ? lo + chunk : c.n;
      if (hi > lo)
        memset(c.res + lo, 0, (hi - lo) * sizeof(float));
    }
  }
  double v = measure_both(omp_sample, &c, busy);
  for (int p = 0; p < P; p++)
    free(c.buf[p]);
  free(c.buf);
  free(c.res);
  return v;
}

/* ---- Open MPI, through bench/mpi_bench under mpirun ------------------------------- */

typedef struct mres {
  int op;
  size_t bytes;
  double us;
} mres;

static char mpi_library[160];

/* Run the helper with P ranks for every op and size (with D > 0: libshmap
 * over P processes of D devices, bench/transport; with D < 0: raw MPI
 * initialised at MPI_THREAD_MULTIPLE, the level libshmap asks for); returns
 * the number of results stored in out (0 when the run failed). */
static int helper_run(int P, int D, const size_t sizes[], int nsizes, int ops,
                      mres out[], int max, int busy)
{
  char cmd[4096], list[1024] = "", oplist[256] = "";
  for (int i = 0; i < nsizes; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%zu",
             i ? "," : "", sizes[i]);
  for (int k = 0; k < NOPS; k++)
    if (ops & (1 << k))
      snprintf(oplist + strlen(oplist), sizeof oplist - strlen(oplist), "%s%s",
               *oplist ? "," : "", op_names[k]);
  /* D > 0: libshmap's bench/transport, D devices in each of P processes. */
  if (D > 0)
    snprintf(cmd, sizeof cmd,
             "'%s' --oversubscribe %s-np %d '%s' %d --sizes %s --ops %s "
             "--reps %d --target-ms %g",
             opt.mpirun, geteuid() == 0 ? "--allow-run-as-root " : "", P,
             opt.thelper, D, list, oplist, opt.reps, opt.target_ms);
  else
    snprintf(cmd, sizeof cmd,
             "'%s' --oversubscribe %s-np %d '%s' --sizes %s --ops %s --reps %d "
             "--target-ms %g%s",
             opt.mpirun, geteuid() == 0 ? "--allow-run-as-root " : "", P,
             opt.helper, list, oplist, opt.reps, opt.target_ms,
             D < 0 ? " --thread multiple" : "");
  if (busy)
    busy_start();
  fflush(stdout);
  FILE *f = popen(cmd, "r");
  if (!f) {
    if (busy)
      busy_stop();
    fprintf(stderr, "bench/run: cannot run %s\n", cmd);
    return 0;
  }
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    char name[64];
    size_t bytes;
    double us;
    if (strncmp(line, "# mpi_library=", 14) == 0) {
      size_t len = strcspn(line + 14, "\n");
      if (len >= sizeof mpi_library)
        len = sizeof mpi_library - 1;
      memcpy(mpi_library, line + 14, len);
      mpi_library[len] = 0;
    } else if (sscanf(line, "op=%63s bytes=%zu us=%lf", name, &bytes, &us) == 3 &&
               n < max) {
      for (int k = 0; k < NOPS; k++)
        if (strcmp(name, op_names[k]) == 0)
          out[n++] = (mres){k, bytes, us};
    }
  }
  int st = pclose(f);
  if (busy)
    busy_stop();
  if (st != 0) {
    fprintf(stderr, "bench/run: '%s' failed (status %d); %s is NA for P=%d\n",
            cmd, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
            D > 0 ? "the transport case" : "mpi_us", P);
    return 0;
  }
  return n;
}

static int mpi_run(int P, const size_t sizes[], int nsizes, int ops, mres out[],
                   int max, int busy)
{
  return helper_run(P, 0, sizes, nsizes, ops, out, max, busy);
}

static double mpi_lookup(const mres *m, int n, int op, size_t bytes)
{
  for (int i = 0; i < n; i++)
    if (m[i].op == op && m[i].bytes == bytes)
      return m[i].us;
  return NA;
}

/* ---- the run ------------------------------------------------------------------------ */

typedef struct result {
  int op, P;
  int sweep; /* 0, or in the scaling sweep 1 + its scheduling mode's index */
  size_t bytes;
  double shmap, omp, mpi, roof;
  double peak_kib; /* the sweep's peak memory per device (sweep_child) */
  double shmap_busy, omp_busy, mpi_busy; /* --contended */
} result;

/* The machine's speed-of-light measurements (sol.c). */
static sol_machine sol;

static result *results;
static int nresults, capresults;

static void add_result(result r)
{
  if (nresults == capresults) {
    capresults = capresults ? 2 * capresults : 128;
    results = realloc(results, sizeof *results * (size_t)capresults);
    if (!results)
      die("out of memory");
  }
  results[nresults++] = r;
}

static void cpu_model(char *buf, size_t n)
{
  snprintf(buf, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ' || *p == '\t')
          p++;
        p[strcspn(p, "\n")] = 0;
        snprintf(buf, n, "%s", p);
      }
      break;
    }
  }
  fclose(f);
}

static double mem_gib(void)
{
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return pages > 0 && psize > 0 ? (double)pages * (double)psize / 1073741824.0
                                : 0;
}

static double loadavg(void)
{
  double l = NA;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1)
      l = NA;
    fclose(f);
  }
  return l;
}

/*
 * Bus bandwidth in GB/s, nccl-tests' convention: the algorithm bandwidth
 * (bytes / time, with `bytes` the full per-device buffer as above) times
 * the share of it each device must move over its link in the optimal
 * algorithm: 2(P-1)/P for an allreduce, (P-1)/P for a reduce-scatter,
 * an all-gather or an all-to-all, 1 for a send/receive pair.  It makes
 * the numbers of different P comparable with one hardware bandwidth.
 */
static double busbw(int op, int P, size_t bytes, double us)
{
  if (op == OP_EMPTY || isnan(us) || us <= 0)
    return NA;
  double algbw = (double)bytes / us * 1e-3; /* bytes/us -> GB/s */
  double f = (double)(P - 1) / P;
  switch (op) {
  case OP_PSUM:
  case OP_PSUM_BF16:
  case OP_PSUM_F16: return algbw * 2 * f;
  case OP_PPERMUTE: return algbw;
  default: return algbw * f;
  }
}

static void run_shmap_case(shmap_mesh *mesh, int op, int P, size_t bytes,
                           int (*pairs)[2], double B, const mres *m, int nm,
                           const mres *mb, int nmb, int sweep)
{
  scase sc = {.mesh = mesh, .op = op, .P = P, .bytes = bytes, .pairs = pairs};
  result r = {.op = op, .P = P, .sweep = sweep, .bytes = bytes, .omp = NA,
              .mpi = NA, .omp_busy = NA, .mpi_busy = NA};
  r.shmap = measure_both(shmap_sample, &sc, &r.shmap_busy);
  if (m)
    r.mpi = mpi_lookup(m, nm, op, bytes);
  if (mb)
    r.mpi_busy = mpi_lookup(mb, nmb, op, bytes);
  r.roof = min_traffic(op, P, bytes) / B;
  add_result(r);
}

/* The OpenMP column of the results from `first` on, measured after the
 * mesh is gone so that neither runtime's idle threads disturb the other.
 * More than 256 OpenMP threads measure only the kernel's scheduler. */
static void run_omp_cases(int first)
{
  if (!opt.omp)
    return;
  for (int i = first; i < nresults; i++) {
    result *r = &results[i];
    if ((r->op == OP_PSUM || r->op == OP_EMPTY) && r->P <= 256 &&
        r->sweep <= 1)
      r->omp = omp_measure(r->op, r->P, r->bytes, &r->omp_busy);
  }
}

/* CPU time of the whole machine (clock ticks): busy, idle and stolen by
 * the hypervisor, from /proc/stat; and this process's own (with the
 * mpirun children and busy processes it waited for).  Together they tell
 * whether anything else ran during the measurement. */
typedef struct cpustat {
  double busy, idle, steal, mine;
} cpustat;

static cpustat cpu_now(void)
{
  cpustat c = {0, 0, 0, 0};
  FILE *f = fopen("/proc/stat", "r");
  if (f) {
    unsigned long long v[8] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
               &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
      c.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6]);
      c.idle = (double)(v[3] + v[4]);
      c.steal = (double)v[7];
    }
    fclose(f);
  }
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  double sec = (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec +
                        kids.ru_utime.tv_sec + kids.ru_stime.tv_sec) +
               1e-6 * (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec +
                               kids.ru_utime.tv_usec + kids.ru_stime.tv_usec);
  c.mine = sec * (double)sysconf(_SC_CLK_TCK);
  return c;
}

static shmap_mesh *make_mesh(int P, int (**pairs)[2])
{
  char text[64];
  snprintf(text, sizeof text, "i=%d", P);
  shmap_mesh *mesh;
  map_or_die(shmap_mesh_create(&mesh, text), "shmap_mesh_create");
  *pairs = xalloc(sizeof **pairs * (size_t)P);
  for (int q = 0; q < P; q++) {
    (*pairs)[q][0] = q;
    (*pairs)[q][1] = (q + 1) % P;
  }
  return mesh;
}

/* ---- the scaling sweep: one process per P and scheduling mode ----------- */

/*
 * Each P of the sweep runs once per scheduling mode, each time in a fresh
 * process (this program again, exec'd with --sweep-child=P and SHMAP_SCHED
 * naming the mode), so that the peak memory it reports is that of one mesh
 * of P devices and of nothing measured before it.  The child reads its
 * resident memory (VmRSS) before it creates the mesh and its peak resident
 * memory (VmHWM, the kernel's high-water mark) after the mesh is gone, and
 * reports the difference: every page the mesh, its devices (their stacks
 * or threads, blocks and the transport's state) and the measured maps ever
 * had resident at once, counted once, as the kernel counts them; what the
 * program and its libraries had before is not the mesh's.
 */
static const char *const sweep_modes[] = {"threads", "fibers"};
#define NSWEEP_MODES 2

/* A "Vm...:" field of /proc/self/status in KiB, or NA where there is none. */
static double status_kib(const char *field)
{
  double v = NA;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return v;
  char line[256];
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      v = strtod(line + n + 1, NULL);
      break;
    }
  fclose(f);
  return v;
}

/* The child: measure psum of 64 floats and all_gather of 16 floats per
 * device on P devices, and print for each the medians (quiet and busy) and
 * the peak memory per device up to the end of that case, in one line for
 * the parent.  all_gather's includes the mesh's peak under psum, but its
 * results (P times its input, on every device) outweigh that.
 *
 * A sample spans from the first device's start to the last one's end, so
 * it includes the devices' leaving the lining-up psum one after another,
 * which in thread mode at a thousand devices takes about as long as a
 * call: a sample of one call counted it twice (12 ms a call at P=1024,
 * against 7 ms with samples of 14 calls).  So psum's samples take at
 * least SWEEP_MIN_CALLS calls.  all_gather's do not: at P=4096 one call
 * takes half a second in fiber mode, and its lining-up is a small part of
 * it. */
#define SWEEP_MIN_CALLS 16
static int sweep_child(int P)
{
  double base = status_kib("VmRSS");
  int (*pairs)[2];
  shmap_mesh *mesh = make_mesh(P, &pairs);
  scase ps = {.mesh = mesh, .op = OP_PSUM, .P = P, .bytes = 256, .pairs = pairs};
  scase ag = {.mesh = mesh, .op = OP_ALL_GATHER, .P = P,
              .bytes = 64 * (size_t)P, .pairs = pairs};
  double v[6];
  min_calls = SWEEP_MIN_CALLS;
  v[0] = measure_both(shmap_sample, &ps, &v[1]);
  min_calls = 1;
  v[2] = (status_kib("VmHWM") - base) / P;
  v[3] = measure_both(shmap_sample, &ag, &v[4]);
  v[5] = (status_kib("VmHWM") - base) / P;
  shmap_mesh_destroy(mesh);
  free(pairs);
  printf("%.17g %.17g %.17g %.17g %.17g %.17g\n", v[0], v[1], v[2], v[3],
         v[4], v[5]);
  return 0;
}

/* Run the child for P in scheduling mode `mode` and read its six numbers
 * (see sweep_child). */
static void sweep_spawn(int P, const char *mode, double out[6])
{
  int fd[2];
  if (pipe(fd) != 0)
    die("pipe: %s", strerror(errno));
  pid_t pid = fork_flushed();
  if (pid == 0) {
    char p[32], reps[32], ms[64];
    snprintf(p, sizeof p, "--sweep-child=%d", P);
    snprintf(reps, sizeof reps, "--reps=%d", opt.reps);
    snprintf(ms, sizeof ms, "--target-ms=%.17g", opt.target_ms);
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    setenv("SHMAP_SCHED", mode, 1);
    execl("/proc/self/exe", "bench/run", p, reps, ms,
          opt.contended ? "--contended" : "--quiet", "--quiet", (char *)NULL);
    fprintf(stderr, "bench/run: exec /proc/self/exe: %s\n", strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  FILE *f = fdopen(fd[0], "r");
  int got = f ? fscanf(f, "%lf %lf %lf %lf %lf %lf", &out[0], &out[1],
                       &out[2], &out[3], &out[4], &out[5])
              : 0;
  if (f)
    fclose(f);
  int status;
  waitpid(pid, &status, 0);
  if (got != 6 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    die("the scaling sweep's P=%d in %s mode failed", P, mode);
}

/* One P of the sweep in both modes: four results, the OpenMP column
 * measured once and given to both modes' lines. */
static void sweep_run(int P, double B)
{
  int first = nresults;
  for (int m = 0; m < NSWEEP_MODES; m++) {
    double v[6];
    progress("P=%d: scaling sweep, %s", P, sweep_modes[m]);
    sweep_spawn(P, sweep_modes[m], v);
    for (int i = 0; i < 2; i++) {
      int op = i ? OP_ALL_GATHER : OP_PSUM;
      size_t bytes = i ? 64 * (size_t)P : 256;
      add_result((result){.op = op, .P = P, .sweep = 1 + m, .bytes = bytes,
                          .shmap = v[3 * i], .shmap_busy = v[3 * i + 1],
                          .omp = NA, .mpi = NA, .omp_busy = NA, .mpi_busy = NA,
                          .roof = min_traffic(op, P, bytes) / B,
                          .peak_kib = v[3 * i + 2]});
    }
  }
  run_omp_cases(first);
  for (int i = first + 2; i < nresults; i++) {
    results[i].omp = results[i - 2].omp;
    results[i].omp_busy = results[i - 2].omp_busy;
  }
}

/* ---- chained maps: device-resident arrays against host round trips ------ */

/* One step of a chain: y = x + 1 on every device's block. */
static int chain_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *y = x ? shmap_out(ctx, 0, x->dtype, x->rank, x->shape) : NULL;
  if (!y)
    return -1;
  const float *a = x->data;
  float *b = y->data;
  int64_t n = shmap_block_numel(x);
  for (int64_t i = 0; i < n; i++)
    b[i] = a[i] + 1.0f;
  return 0;
}

/* Median microseconds per step of `steps` chained maps on P devices with
 * `bytes` per device: through sharded arrays (host == 0), or exporting to
 * and importing from the host between steps (host == 1). */
static double chain_measure(int P, size_t bytes, int host)
{
  char text[32];
  snprintf(text, sizeof text, "i=%d", P);
  shmap_mesh *mesh;
  map_or_die(shmap_mesh_create(&mesh, text), "mesh");
  int64_t n = (int64_t)(bytes / 4) * P;
  float *buf = xalloc((size_t)n * 4);
  memset(buf, 0, (size_t)n * 4);
  const char *spec = "P('i')";
  const int steps = 10, samples = opt.quick ? 3 : 7;
  double t[16];
  shmap_array *a;
  map_or_die(shmap_array_from_host_sharded(&a, mesh, spec, SHMAP_F32, 1,
                                           (int64_t[]){n}, buf),
             "chain import");
  for (int s = -1; s < samples; s++) { /* s = -1 warms up */
    double t0 = now_us();
    for (int k = 0; k < steps; k++) {
      shmap_array *b;
      if (host) {
        shmap_array *h;
        map_or_die(shmap_array_to_host(a, buf), "chain export");
        shmap_array_destroy(a);
        map_or_die(shmap_array_from_host(&h, SHMAP_F32, 1, (int64_t[]){n}, buf),
                   "chain host array");
        map_or_die(shmap_map(mesh, chain_body, NULL, 1, &h, &spec, 1, &b,
                             &spec), "chain map");
        shmap_array_destroy(h);
      } else {
        map_or_die(shmap_map(mesh, chain_body, NULL, 1, &a, &spec, 1, &b,
                             &spec), "chain map");
        shmap_array_destroy(a);
      }
      a = b;
    }
    if (s >= 0)
      t[s] = (now_us() - t0) / steps;
  }
  shmap_array_destroy(a);
  shmap_mesh_destroy(mesh);
  free(buf);
  return median(t, samples);
}

static double chain_both(int P, size_t bytes, int host, double *busy)
{
  double quiet = chain_measure(P, bytes, host);
  *busy = NA;
  if (opt.contended) {
    busy_start();
    *busy = chain_measure(P, bytes, host);
    busy_stop();
  }
  return quiet;
}

/* One result line: times, busbw, and with --contended the busy times and
 * their ratios to the quiet ones. */
static void print_line(const char *op, int P, size_t bytes, double shmap,
                       double bw, double omp, double mpi, double roof,
                       double shmap_b, double omp_b, double mpi_b,
                       const char *extra)
{
  char a[32], b[32], c[32], d[32], e[32];
  printf("op=%s P=%d bytes=%zu shmap_us=%s busbw=%s omp_us=%s mpi_us=%s "
         "roofline_us=%s",
         op, P, bytes, fmt_us(shmap, a, sizeof a), fmt_g(bw, e, sizeof e),
         fmt_us(omp, b, sizeof b), fmt_us(mpi, c, sizeof c),
         fmt_us(roof, d, sizeof d));
  /* The speed of light and each measured column's ratio to it. */
  sol_bound sb = sol_case(&sol, op, P, bytes);
  double s = sb.us > 0 ? sb.us : NA;
  char f[32];
  printf(" sol_us=%s sol_lat_us=%s sol_bw_us=%s shmap_sol_x=%s omp_sol_x=%s "
         "mpi_sol_x=%s",
         fmt_us(s, a, sizeof a), fmt_us(sb.lat_us, b, sizeof b),
         fmt_us(sb.bw_us, c, sizeof c), fmt_us(shmap / s, d, sizeof d),
         fmt_us(omp / s, e, sizeof e), fmt_us(mpi / s, f, sizeof f));
  if (opt.contended) {
    char r1[32], r2[32], r3[32];
    printf(" shmap_busy_us=%s shmap_busy_x=%s omp_busy_us=%s omp_busy_x=%s "
           "mpi_busy_us=%s mpi_busy_x=%s",
           fmt_us(shmap_b, a, sizeof a), fmt_us(shmap_b / shmap, r1, sizeof r1),
           fmt_us(omp_b, b, sizeof b), fmt_us(omp_b / omp, r2, sizeof r2),
           fmt_us(mpi_b, c, sizeof c), fmt_us(mpi_b / mpi, r3, sizeof r3));
  }
  printf("%s\n", extra ? extra : "");
}

int main(int argc, char **argv)
{
  parse_args(argc, argv);
  atexit(busy_atexit);
  if (opt.sweep_child)
    return sweep_child(opt.sweep_child);
  double t_start = now_us();
  double load = loadavg();
  cpustat c0 = cpu_now();

  /* Bandwidth first, while nothing else of ours runs. */
  size_t bw_bytes = (size_t)64 << 20;
  progress("measuring memory bandwidth (2 threads x 64 MiB memcpy)");
  double B = measure_bandwidth(bw_bytes, opt.quick ? 6 : 12); /* bytes/us */
  progress("measuring the speed of light (cache-line ping-pong, read and "
           "write rates from 4 KiB to 256 MiB)");
  sol_measure(&sol, opt.quick);

  for (int pi = 0; pi < opt.nps; pi++) {
    int P = opt.ps[pi];
    for (int s = 0; s < opt.nsizes; s++)
      if (opt.sizes[s] % (4 * (size_t)P))
        die("size %zu is not divisible into %d f32 chunks", opt.sizes[s], P);
  }

  /* The pairing of the cores around each P's cells: Open MPI's are
   * measured first, then libshmap's, and the cache-line transfer time
   * before the one and after the other says whether both ran in one
   * pairing (printed with the header). */
  double line_before[MAXLIST], line_after[MAXLIST];
  for (int pi = 0; pi < opt.nps; pi++) {
    int P = opt.ps[pi];
    mres m[MAXLIST * NOPS], mb[MAXLIST * NOPS];
    int nm = 0, nmb = 0;
    line_before[pi] = sol_line_now(&sol);
    if (opt.mpi) {
      progress("P=%d: Open MPI (%d ranks through mpirun)", P, P);
      nm = mpi_run(P, opt.sizes, opt.nsizes, opt.ops & MPI_OPS, m,
                   MAXLIST * NOPS, 0);
      if (opt.contended) {
        progress("P=%d: Open MPI, contended", P);
        nmb = mpi_run(P, opt.sizes, opt.nsizes, opt.ops & MPI_OPS, mb,
                      MAXLIST * NOPS, 1);
      }
    }
    int first = nresults;
    int (*pairs)[2];
    shmap_mesh *mesh = make_mesh(P, &pairs);
    const mres *pm = opt.mpi ? m : NULL, *pmb = opt.contended ? pm ? mb : NULL : NULL;
    for (int op = 0; op < NOPS; op++) {
      if (!(opt.ops & (1 << op)))
        continue;
      progress("P=%d: %s", P, op_names[op]);
      if (op == OP_EMPTY) {
        run_shmap_case(mesh, op, P, 0, pairs, B, pm, nm, pmb, nmb, 0);
        continue;
      }
      for (int s = 0; s < opt.nsizes; s++)
        run_shmap_case(mesh, op, P, opt.sizes[s] / (op_half(op) ? 2 : 1), pairs,
                       B, pm, nm, pmb, nmb, 0);
    }
    shmap_mesh_destroy(mesh);
    free(pairs);
    line_after[pi] = sol_line_now(&sol);
    progress("P=%d: OpenMP", P);
    run_omp_cases(first);
  }

  /* The scaling sweep: a psum of 64 floats, and an all_gather of 16 floats
   * (one cache line) from each device, on meshes up to 1024 devices, in
   * both scheduling modes. */
  for (int e = 0; e < opt.nsweep; e++)
    sweep_run(opt.sweep[e], B);

  /* Chained maps, 1 MiB per device on 8 devices (or the last P given). */
  int cP = opt.nps ? opt.ps[opt.nps - 1] : 8;
  size_t cbytes = (size_t)1 << 20;
  progress("P=%d: chained maps", cP);
  double chain_dev_b, chain_host_b;
  double chain_dev = chain_both(cP, cbytes, 0, &chain_dev_b);
  double chain_host = chain_both(cP, cbytes, 1, &chain_host_b);
  /* A step reads each block and writes a new one. */
  double chain_roof = 2.0 * (double)cP * (double)cbytes / B;

  /* The collective matmul: the local matmul alone, blocking transfers,
   * overlapped transfers (bench/cmatmul.c). */
  cm_result *cm = NULL;
  int ncm = cmatmul_measure(opt.ps, opt.nps, opt.cm_n, opt.ncm, opt.reps,
                            opt.verbose, &cm);
  if (ncm < 0)
    die("collective matmul: %s", shmap_errmsg());

  /* The transport dimension: libshmap with R processes of D devices
   * beside raw MPI on R*D ranks (one line per op, layout and size). */
  enum { TOPS = 1 << OP_PSUM | 1 << OP_PSUM_SCATTER | 1 << OP_ALL_GATHER |
                1 << OP_PPERMUTE };
  mres *tr = NULL;
  int *ntr_s = NULL, *ntr_m = NULL, *ntr_t = NULL;
  if (opt.ntr && (opt.ops & TOPS)) {
    tr = calloc((size_t)opt.ntr * 3 * MAXLIST * NOPS, sizeof *tr);
    ntr_s = calloc((size_t)opt.ntr, sizeof *ntr_s);
    ntr_m = calloc((size_t)opt.ntr, sizeof *ntr_m);
    ntr_t = calloc((size_t)opt.ntr, sizeof *ntr_t);
    if (!tr || !ntr_s || !ntr_m || !ntr_t)
      die("out of memory");
    for (int t = 0; t < opt.ntr; t++) {
      int R = opt.tr_r[t], D = opt.tr_d[t];
      mres *s = tr + (size_t)t * 3 * MAXLIST * NOPS, *m = s + MAXLIST * NOPS,
           *mt = m + MAXLIST * NOPS;
      progress("transport %dx%d: libshmap over %d processes", R, D, R);
      ntr_s[t] = helper_run(R, D, opt.sizes, opt.nsizes, opt.ops & TOPS, s,
                            MAXLIST * NOPS, 0);
      progress("transport %dx%d: raw MPI on %d ranks", R, D, R * D);
      ntr_m[t] = helper_run(R * D, 0, opt.sizes, opt.nsizes, opt.ops & TOPS,
                            m, MAXLIST * NOPS, 0);
      progress("transport %dx%d: raw MPI on %d ranks at MPI_THREAD_MULTIPLE",
               R, D, R * D);
      ntr_t[t] = helper_run(R * D, -1, opt.sizes, opt.nsizes, opt.ops & TOPS,
                            mt, MAXLIST * NOPS, 0);
    }
  }

  /* A psum of 64 and of 1024 floats over one group spread over 2 and 4
   * processes:
   * the median of three samples of calibrated length per case, so that
   * the cost per device can be read across the sweep.  A sample starts
   * after a barrier whose end reaches the devices over a round of their
   * workers (about 1 ms at 1024 devices), so the samples are long enough
   * for that not to count: at 5 ms, the psum over 1024 devices in 2
   * processes measured 480 us a call, at 50 ms 320. */
  double psw[2][PSW_SIZES][MAXLIST];
  for (int ri = 0; ri < 2 && opt.npsweep; ri++) {
    int R = 2 << ri, reps = opt.reps;
    double target = opt.target_ms;
    opt.reps = 3;
    opt.target_ms = opt.quick ? 5 : 50;
    for (int e = 0; e < opt.npsweep; e++) {
      int P = opt.psweep[e];
      mres two[PSW_SIZES];
      progress("process sweep: psum over %d devices in %d processes", P, R);
      int got = helper_run(R, P / R, psw_bytes, PSW_SIZES, 1 << OP_PSUM, two,
                           PSW_SIZES, 0);
      for (int b = 0; b < PSW_SIZES; b++) {
        psw[ri][b][e] = NA;
        for (int i = 0; i < got; i++)
          if (two[i].bytes == psw_bytes[b])
            psw[ri][b][e] = two[i].us;
      }
    }
    opt.reps = reps;
    opt.target_ms = target;
  }

  cpustat c1 = cpu_now();
  double all = (c1.busy - c0.busy) + (c1.idle - c0.idle) + (c1.steal - c0.steal);
  double other = all > 0 ? 100 * ((c1.busy - c0.busy) - (c1.mine - c0.mine)) / all : NA;
  double steal = all > 0 ? 100 * (c1.steal - c0.steal) / all : NA;
  if (other < 0)
    other = 0;
  char cpu[256];
  cpu_model(cpu, sizeof cpu);
  const char *sched = getenv("SHMAP_SCHED");
  printf("# libshmap %d.%d.%d bench: nproc=%ld cpu=\"%s\" mem=%.0fGiB "
         "bandwidth=%.2fGB/s (read+write, 2 threads x 64 MiB memcpy, best of "
         "%d) loadavg=%.2f other_cpu=%.0f%% steal=%.0f%% SHMAP_SCHED=%s "
         "mpi=\"%s\" samples=%d sample_ms=%g%s%s\n",
         SHMAP_VERSION_MAJOR, SHMAP_VERSION_MINOR, SHMAP_VERSION_PATCH,
         sysconf(_SC_NPROCESSORS_ONLN), cpu, mem_gib(), B * 1e-3,
         opt.quick ? 6 : 12, load, other, steal, sched && *sched ? sched : "auto",
         opt.mpi ? (*mpi_library ? mpi_library : "?") : "NA", opt.reps,
         opt.target_ms, opt.quick ? " quick" : "",
         opt.contended ? " contended" : "");
  printf("# speed of light: line_us=%.4f (one-way cache-line transfer, %d "
         "cores) switch_us=%.3f (one handover of a core between two threads "
         "through a futex) read/write GB/s at working sets",
         sol.line_us, sol.cores, sol.switch_us);
  for (int i = 0; i < SOL_SIZES; i++) {
    size_t ws = SOL_MIN << (2 * i);
    printf(" %zu%s=%.1f/%.1f", ws >> (ws >= (1u << 20) ? 20 : 10),
           ws >= (1u << 20) ? "M" : "K", sol.read[i] * 1e-3,
           sol.write[i] * 1e-3);
  }
  printf("\n");
  if (sol.cores == 2 && opt.nps) {
    printf("# pairing: line_us at the start and at the end of each P's "
           "cells (Open MPI's, then libshmap's):");
    for (int pi = 0; pi < opt.nps; pi++)
      printf(" P=%d:%.3f/%.3f", opt.ps[pi], line_before[pi], line_after[pi]);
    printf("\n");
  }
  /* Grouped by op, then P, then size; the sweep last. */
  for (int op = 0; op <= NOPS; op++) {
    if (op == NOPS && opt.nsweep)
      printf("# scaling sweep: psum of 64 floats, all_gather of 16 floats "
             "per device, each P in both scheduling modes (sched=), each in a "
             "process of its own; peak_kib_per_device = (that process's peak "
             "resident memory VmHWM up to the end of the case - its resident "
             "memory VmRSS before the mesh) / P, in KiB\n");
    for (int i = 0; i < nresults; i++) {
      const result *r = &results[i];
      if (op < NOPS ? r->sweep || r->op != op : !r->sweep)
        continue;
      char extra[160] = "";
      if (r->sweep) {
        char k[32];
        snprintf(extra, sizeof extra, " sched=%s peak_kib_per_device=%s",
                 sweep_modes[r->sweep - 1], fmt_us(r->peak_kib, k, sizeof k));
        /* Thread mode: every device's thread runs at least once per call
         * after sleeping (call k + 1 needs call k's result, which needs
         * every member), so P handovers of a core spread over the cores. */
        if (strcmp(sweep_modes[r->sweep - 1], "threads") == 0) {
          double fl = r->P * sol.switch_us / sol.cores;
          char f1[32], f2[32];
          snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
                   " switch_floor_us=%s shmap_floor_x=%s",
                   fmt_us(fl, f1, sizeof f1), fmt_us(r->shmap / fl, f2, sizeof f2));
        }
      }
      print_line(op_names[r->op], r->P, r->bytes, r->shmap,
                 busbw(r->op, r->P, r->bytes, r->shmap), r->omp, r->mpi,
                 r->roof, r->shmap_busy, r->omp_busy, r->mpi_busy, extra);
    }
  }
  print_line("chain_device", cP, cbytes, chain_dev, NA, NA, NA, chain_roof,
             chain_dev_b, NA, NA, NULL);
  print_line("chain_host", cP, cbytes, chain_host, NA, NA, NA, chain_roof,
             chain_host_b, NA, NA, NULL);
  if (tr) {
    printf("# transport: libshmap over R processes of D devices (bench/transport) "
           "beside raw MPI on R*D ranks, initialised with MPI_Init (mpi_us) "
           "and at MPI_THREAD_MULTIPLE as libshmap is (mpi_mt_us); "
           "ratio = shmap_us / mpi_us, ratio_mt = shmap_us / mpi_mt_us; "
           "sol_us: the speed of light of R*D devices on this machine "
           "(a ppermute's result a block of its own), shmap_sol_x and "
           "mpi_sol_x each time over it\n");
    for (int op = 0; op < NOPS; op++)
      for (int t = 0; t < opt.ntr && (TOPS & (1 << op)); t++)
        for (int k = 0; k < opt.nsizes && (opt.ops & (1 << op)); k++) {
          const mres *s = tr + (size_t)t * 3 * MAXLIST * NOPS,
                     *m = s + MAXLIST * NOPS, *mt = m + MAXLIST * NOPS;
          double a = mpi_lookup(s, ntr_s[t], op, opt.sizes[k]);
          double b = mpi_lookup(m, ntr_m[t], op, opt.sizes[k]);
          double c = mpi_lookup(mt, ntr_t[t], op, opt.sizes[k]);
          /* The processes share this machine: the bound of R*D devices,
           * with a ppermute's result a block of its own (see sol.h). */
          int P = opt.tr_r[t] * opt.tr_d[t];
          sol_bound sb = sol_case(
              &sol, strcmp(op_names[op], "ppermute") ? op_names[op]
                                                     : "ppermute_new",
              P, opt.sizes[k]);
          char x[32], y[32], z[32], u[32], v[32], g[32], h[32], q[32];
          printf("op=%s transport=%dx%d P=%d bytes=%zu shmap_us=%s mpi_us=%s "
                 "ratio=%s mpi_mt_us=%s ratio_mt=%s sol_us=%s "
                 "shmap_sol_x=%s mpi_sol_x=%s\n",
                 op_names[op], opt.tr_r[t], opt.tr_d[t], P, opt.sizes[k],
                 fmt_us(a, x, sizeof x), fmt_us(b, y, sizeof y),
                 fmt_us(a / b, z, sizeof z), fmt_us(c, u, sizeof u),
                 fmt_us(a / c, v, sizeof v), fmt_us(sb.us, g, sizeof g),
                 fmt_us(a / sb.us, h, sizeof h),
                 fmt_us(b / sb.us, q, sizeof q));
        }
    free(tr);
    free(ntr_s);
    free(ntr_m);
    free(ntr_t);
  }
  if (opt.npsweep) {
    printf("# process sweep: psum of 64 and of 1024 floats per device over "
           "one group of P devices in R processes; per_device_x = (shmap_us "
           "/ P) over its value at the first P for the same size (1: linear "
           "in P)\n");
    for (int ri = 0; ri < 2; ri++)
      for (int b = 0; b < PSW_SIZES; b++)
        for (int e = 0; e < opt.npsweep; e++) {
          char x[32], y[32], z[32];
          int P = opt.psweep[e];
          double per = psw[ri][b][e] / P,
                 per0 = psw[ri][b][0] / opt.psweep[0];
          printf("op=psum procs=%d P=%d bytes=%zu shmap_us=%s "
                 "us_per_device=%s per_device_x=%s\n",
                 2 << ri, P, psw_bytes[b], fmt_us(psw[ri][b][e], x, sizeof x),
                 fmt_us(per, y, sizeof y), fmt_us(per / per0, z, sizeof z));
        }
  }
  cmatmul_print(stdout, cm, ncm, B);
  free(cm);
  progress("done in %.0f s", (now_us() - t_start) * 1e-6);
  free(results);
  return 0;
}
