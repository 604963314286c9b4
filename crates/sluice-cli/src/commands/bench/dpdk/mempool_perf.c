/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * One case of DPDK's mempool_perf_autotest, measured in slices on command.
 *
 * `sluice bench mempool` compiles this program against the installed DPDK
 * (pkg-config libdpdk) when it runs, and runs it beside its own measurement
 * of the same case, slice for slice, on the same CPUs: both figures then
 * come from the same stretch of time.
 *
 *   mempool_perf EAL-ARGS -- CACHE BULK KEEP POOL_SIZE ELT_SIZE
 *
 * The pool holds POOL_SIZE elements of ELT_SIZE bytes, with a per-lcore
 * cache of CACHE elements (0: none), on the "ring_mp_mc" handler, which
 * rte_mempool_create() picks when given no flags, as the autotest's pools.
 * Every lcore of the EAL works (the main lcore and any workers).
 *
 * Commands on standard input, one a line:
 *
 *   run WARMUP ROUNDS [const]
 *       On every lcore: get KEEP elements in calls of BULK
 *       (rte_mempool_generic_get() with the lcore's default cache), then put
 *       them back the same way (rte_mempool_generic_put()), WARMUP times
 *       untimed; then, once every lcore has warmed up, ROUNDS times timed.
 *       BULK is a run-time value (the autotest's constant_n=0), or with
 *       "const" a compile-time constant (constant_n=1: the calls inlined for
 *       that size; BULK 1, 4, 8 or 32).
 *       Answer: "slice" followed by "OPS START END" for each lcore, main
 *       lcore first: the elements it got and put back while timed, and the
 *       TSC at the start and at the end of its timed loop.
 *   quit
 *       (or the end of the input) Checks that every element is back in the
 *       pool, answers "full", and ends.
 *
 * Other answers: "ready" once the pool exists; "error: TEXT" when something
 * fails, after which the program ends with status 1. The EAL's own log
 * lines go to standard output too; they start with none of these words.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mempool.h>
#include <rte_pause.h>

/* Most elements an lcore holds at once (the autotest's largest n_keep). */
#define MAX_KEEP 512

/* What one lcore measured in a slice. */
struct lcore_figures {
	uint64_t ops;
	uint64_t start;
	uint64_t end;
} __rte_cache_aligned;

/* The case, fixed at start. */
static struct rte_mempool *pool;
static unsigned int pool_size;
static unsigned int bulk;
static unsigned int keep;

/* The slice being run: set by the main lcore before it launches the workers. */
static int constant_bulk;
static uint64_t warmup_rounds;
static uint64_t timed_rounds;
/* Lcores past their warm-up in this slice. */
static uint32_t warmed_up;

static struct lcore_figures figures[RTE_MAX_LCORE];

/*
 * Writes every element's index in the pool into its first four bytes and
 * clears the rest, so every element has been touched before the first slice.
 */
static void
init_element(struct rte_mempool *mp, void *arg, void *obj, unsigned int index)
{
	RTE_SET_USED(arg);
	memset(obj, 0, mp->elt_size);
	memcpy(obj, &index, sizeof(index));
}

/*
 * Gets `n_keep` elements in calls of `n_bulk`, then puts them back the same
 * way, `rounds` times. Returns 0, or -1 when a get fails: the elements got in
 * that round are put back first. Inlined into its callers, so that a
 * constant `n_bulk` is one in the mempool calls too.
 */
static __rte_always_inline int
get_put_loop(struct rte_mempool *mp, struct rte_mempool_cache *cache,
	     unsigned int n_keep, unsigned int n_bulk, uint64_t rounds)
{
	void *table[MAX_KEEP] __rte_cache_aligned;
	unsigned int idx;
	uint64_t round;

	for (round = 0; round < rounds; round++) {
		for (idx = 0; idx < n_keep; idx += n_bulk) {
			if (unlikely(rte_mempool_generic_get(mp, &table[idx],
							     n_bulk, cache) < 0)) {
				if (idx > 0)
					rte_mempool_generic_put(mp, table, idx, cache);
				return -1;
			}
		}
		for (idx = 0; idx < n_keep; idx += n_bulk)
			rte_mempool_generic_put(mp, &table[idx], n_bulk, cache);
	}
	return 0;
}

/* The loop with the bulk size a run-time value. */
static __rte_noinline int
get_put_variable(struct rte_mempool *mp, struct rte_mempool_cache *cache,
		 unsigned int n_keep, unsigned int n_bulk, uint64_t rounds)
{
	return get_put_loop(mp, cache, n_keep, n_bulk, rounds);
}

/* Whether the loop has a compile-time form for `n_bulk`. */
static int
has_constant_form(unsigned int n_bulk)
{
	return n_bulk == 1 || n_bulk == 2 || n_bulk == 4 || n_bulk == 8 ||
	       n_bulk == 32;
}

/*
 * The loop with the bulk size a compile-time constant: one copy per size
 * of has_constant_form(); -1 for another size.
 */
static __rte_noinline int
get_put_constant(struct rte_mempool *mp, struct rte_mempool_cache *cache,
		 unsigned int n_keep, unsigned int n_bulk, uint64_t rounds)
{
	switch (n_bulk) {
	case 1:
		return get_put_loop(mp, cache, n_keep, 1, rounds);
	case 2:
		return get_put_loop(mp, cache, n_keep, 2, rounds);
	case 4:
		return get_put_loop(mp, cache, n_keep, 4, rounds);
	case 8:
		return get_put_loop(mp, cache, n_keep, 8, rounds);
	case 32:
		return get_put_loop(mp, cache, n_keep, 32, rounds);
	default:
		return -1;
	}
}

/* The loop in the form the slice asks for. */
static int
get_put_rounds(struct rte_mempool *mp, struct rte_mempool_cache *cache,
	       unsigned int n_keep, unsigned int n_bulk, uint64_t rounds)
{
	if (constant_bulk)
		return get_put_constant(mp, cache, n_keep, n_bulk, rounds);
	return get_put_variable(mp, cache, n_keep, n_bulk, rounds);
}

/* One lcore's part of a slice (launched on every lcore). */
static int
run_slice(void *arg)
{
	unsigned int lcore = rte_lcore_id();
	struct lcore_figures *mine = &figures[lcore];
	/* NULL without a cache: every call then goes to the ring. */
	struct rte_mempool_cache *cache = rte_mempool_default_cache(pool, lcore);
	int ret;

	RTE_SET_USED(arg);
	mine->ops = 0;
	mine->start = 0;
	mine->end = 0;
	ret = get_put_rounds(pool, cache, keep, bulk, warmup_rounds);
	/* Every lcore arrives, so none waits forever for one that failed. */
	__atomic_add_fetch(&warmed_up, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&warmed_up, __ATOMIC_ACQUIRE) < rte_lcore_count())
		rte_pause();
	if (ret < 0)
		return -1;
	mine->start = rte_rdtsc_precise();
	ret = get_put_rounds(pool, cache, keep, bulk, timed_rounds);
	mine->end = rte_rdtsc_precise();
	if (ret < 0)
		return -1;
	mine->ops = timed_rounds * keep;
	return 0;
}

/* Runs one slice on every lcore and prints its figures; -1 on failure. */
static int
slice(uint64_t warmup, uint64_t rounds, int constant)
{
	unsigned int lcore;
	int failed = 0;

	constant_bulk = constant;
	warmup_rounds = warmup;
	timed_rounds = rounds;
	__atomic_store_n(&warmed_up, 0, __ATOMIC_RELEASE);
	RTE_LCORE_FOREACH_WORKER(lcore) {
		if (rte_eal_remote_launch(run_slice, NULL, lcore) != 0) {
			printf("error: cannot launch lcore %u\n", lcore);
			/* The lcores launched wait for it: this cannot go on. */
			exit(1);
		}
	}
	if (run_slice(NULL) < 0)
		failed = 1;
	RTE_LCORE_FOREACH_WORKER(lcore) {
		if (rte_eal_wait_lcore(lcore) < 0)
			failed = 1;
	}
	if (failed) {
		printf("error: the pool ran out of elements (a get of %u failed)\n",
		       bulk);
		return -1;
	}
	printf("slice");
	RTE_LCORE_FOREACH(lcore) {
		printf(" %" PRIu64 " %" PRIu64 " %" PRIu64, figures[lcore].ops,
		       figures[lcore].start, figures[lcore].end);
	}
	printf("\n");
	return 0;
}

/* Parses a whole decimal number in [min, max] from `text`; -1 if it is not one. */
static long
parse_number(const char *text, long min, long max)
{
	char *end;
	long value;

	errno = 0;
	value = strtol(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || value < min || value > max)
		return -1;
	return value;
}

/* Checks that every element is back, frees the pool and the EAL; the exit status. */
static int
finish(int status)
{
	unsigned int avail = rte_mempool_avail_count(pool);

	if (avail != pool_size) {
		printf("error: the pool holds %u of its %u elements at the end\n",
		       avail, pool_size);
		status = 1;
	} else if (status == 0) {
		printf("full\n");
	}
	rte_mempool_free(pool);
	rte_eal_cleanup();
	return status;
}

int
main(int argc, char **argv)
{
	char line[128];
	long cache, elt_size, number;
	int consumed;

	/* One line at a time: the reader acts on each as it arrives. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	consumed = rte_eal_init(argc, argv);
	if (consumed < 0) {
		printf("error: the EAL did not start: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	argc -= consumed;
	argv += consumed;
	if (argc != 6) {
		printf("error: usage: mempool_perf EAL-ARGS -- CACHE BULK KEEP "
		       "POOL_SIZE ELT_SIZE\n");
		rte_eal_cleanup();
		return 1;
	}
	cache = parse_number(argv[1], 0, RTE_MEMPOOL_CACHE_MAX_SIZE);
	number = parse_number(argv[2], 1, MAX_KEEP);
	bulk = number < 0 ? 0 : (unsigned int)number;
	number = parse_number(argv[3], 1, MAX_KEEP);
	keep = number < 0 ? 0 : (unsigned int)number;
	number = parse_number(argv[4], 1, 1L << 24);
	pool_size = number < 0 ? 0 : (unsigned int)number;
	elt_size = parse_number(argv[5], 1, 1L << 20);
	if (cache < 0 || bulk == 0 || keep == 0 || keep % bulk != 0 ||
	    pool_size == 0 || elt_size < 0) {
		printf("error: bad case: CACHE 0..%u, BULK dividing KEEP, KEEP 1..%u, "
		       "POOL_SIZE and ELT_SIZE positive\n",
		       RTE_MEMPOOL_CACHE_MAX_SIZE, MAX_KEEP);
		rte_eal_cleanup();
		return 1;
	}
	pool = rte_mempool_create("sluice_bench", pool_size, (unsigned int)elt_size,
				  (unsigned int)cache, 0, NULL, NULL,
				  init_element, NULL, SOCKET_ID_ANY, 0);
	if (pool == NULL) {
		printf("error: cannot create the pool: %s\n", rte_strerror(rte_errno));
		rte_eal_cleanup();
		return 1;
	}
	printf("ready\n");

	while (fgets(line, sizeof(line), stdin) != NULL) {
		uint64_t warmup, rounds;
		char form[8] = "";
		int fields;

		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line, "quit") == 0)
			break;
		fields = sscanf(line, "run %" SCNu64 " %" SCNu64 " %7s", &warmup,
				&rounds, form);
		if (fields < 2 || rounds == 0 ||
		    (fields == 3 && strcmp(form, "const") != 0)) {
			printf("error: not a command: %s\n", line);
			return finish(1);
		}
		if (fields == 3 && !has_constant_form(bulk)) {
			printf("error: no compile-time form for bulk %u (1, 4, 8, 32)\n",
			       bulk);
			return finish(1);
		}
		if (slice(warmup, rounds, fields == 3) < 0)
			return finish(1);
	}
	return finish(0);
}
