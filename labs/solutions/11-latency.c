/*
 * Lab 11: measure your own program's latency against ib_send_lat (labs/11-latency/README.md).
 * A ping-pong of 8-byte SENDs: the requester SENDs, the responder answers each with a SEND of
 * its own; the requester times each round trip from before its ibv_post_send to the reply's
 * receive completion, and prints the median half round trip of the timed iterations, which is
 * what ib_send_lat reports as t_typical.
 *   cc -o lab11 lab.c -libverbs && softverbs labs check 11 ./lab11
 */
#include "../common/labkit.h"

#define SIZE 8
#define WARMUP 50
#define ITERS 500

/* Post one receive of SIZE bytes at s->buf + LAB_BUF / 2. */
static void post_recv(struct side *s)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf + LAB_BUF / 2, .length = SIZE,
			       .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s->qp, &wr, &bad))
		lab_die("ibv_post_recv");
}

/* Post one signaled SEND of the SIZE bytes at s->buf. */
static void post_send(struct side *s)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf, .length = SIZE, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(s->qp, &wr, &bad))
		lab_die("ibv_post_send");
}

/* Poll until the receive completion comes (the SEND's own completions pass on the way). */
static void await_recv(struct side *s)
{
	while (lab_poll(s, 0).opcode != IBV_WC_RECV)
		;
}

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int requester(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	static double half[ITERS];
	lab_setup(&s, "requester", "softverbs0", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 1000, &peer);
	lab_connect(&s, 1000, &peer);
	post_recv(&s);
	lab_await(sock); /* the responder's first receive is posted */
	for (int i = 0; i < WARMUP + ITERS; i++) {
		/* TODO(1): time one round trip: read the clock before posting the SEND and after
		 * the reply's receive completion (re-posting the receive is not part of it). */
		double t0 = now_us();
		post_send(&s);
		await_recv(&s);
		double t1 = now_us();
		post_recv(&s);
		/* TODO(2): keep half of each timed round trip (the warm-up's are set-up). */
		if (i >= WARMUP)
			half[i - WARMUP] = (t1 - t0) / 2;
	}
	/* TODO(3): print the median half round trip of the ITERS timed iterations. */
	qsort(half, ITERS, sizeof half[0], by_value);
	printf("lat half_rtt_us median=%.2f iters=%d\n", half[ITERS / 2], ITERS);
	lab_signal(sock); /* done */
	lab_teardown(&s);
	return 0;
}

static int responder(int sock)
{
	struct side s = { 0 };
	struct peer_info peer;
	lab_setup(&s, "responder", "softverbs1", IBV_ACCESS_LOCAL_WRITE, 0);
	lab_exchange(sock, &s, 2000, &peer);
	lab_connect(&s, 2000, &peer);
	post_recv(&s);
	lab_signal(sock); /* go */
	for (int i = 0; i < WARMUP + ITERS; i++) {
		await_recv(&s);
		post_recv(&s);
		post_send(&s); /* the pong */
	}
	/* The last pong's completion. */
	while (lab_poll(&s, 0).opcode != IBV_WC_SEND)
		;
	lab_await(sock);
	lab_teardown(&s);
	return 0;
}

int main(void)
{
	return lab_two(requester, responder);
}
