/* The latency of one dependent load from a working set of each size: a pointer chase through
 * one pointer per cache line, the lines visited in a random cyclic order (so neither the
 * hardware prefetcher nor the next line helps), after one warm-up lap. Prints, per size, the
 * nanoseconds per load: where the L1, L2, L3 and memory (with their TLB misses) begin on the
 * machine it runs on. docs/decisions.md ("The 1.25x bound from 16 to 1,024 hosts is below the
 * memory hierarchy's floor") reads the simulator's cost per event against these figures.
 *
 * Build and run: cc -O2 -o /tmp/mem_latency scripts/mem_latency.c && /tmp/mem_latency */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LINE 64
#define LOADS 20000000UL

static double seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* xorshift64: a fixed seed, so every run visits the lines in the same order. */
static uint64_t next_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int main(void)
{
	static const size_t kib[] = { 64, 512, 1024, 2048, 4096, 8192, 16384, 28672, 65536, 262144 };
	uint64_t seed = 0x9E3779B97F4A7C15ULL;

	for (size_t k = 0; k < sizeof(kib) / sizeof(kib[0]); k++) {
		size_t lines = kib[k] * 1024 / LINE;
		char *mem = aligned_alloc(4096, lines * LINE);
		size_t *order = malloc(lines * sizeof(*order));
		if (!mem || !order) {
			fprintf(stderr, "mem_latency: cannot allocate %zu KiB\n", kib[k]);
			return 1;
		}
		for (size_t i = 0; i < lines; i++)
			order[i] = i;
		for (size_t i = lines - 1; i > 0; i--) {
			size_t j = next_random(&seed) % (i + 1);
			size_t t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		/* Each visited line holds the address of the next one in the cycle. */
		for (size_t i = 0; i < lines; i++)
			*(void **)(mem + order[i] * LINE) = mem + order[(i + 1) % lines] * LINE;

		void **p = (void **)(mem + order[0] * LINE);
		for (size_t i = 0; i < lines; i++)
			p = *p;
		double t0 = seconds();
		for (size_t i = 0; i < LOADS; i++)
			p = *p;
		double t1 = seconds();
		/* Printing p keeps the chase from being optimised away. */
		printf("%7zu KiB: %6.1f ns per dependent load (%p)\n", kib[k],
		       (t1 - t0) / (double)LOADS * 1e9, (void *)p);
		free(order);
		free(mem);
	}
	return 0;
}
