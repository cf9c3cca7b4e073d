/* sync_disconnect.c: a synchronous (NULL channel) connected pair in one process, the blocking
 * calls that wait for the other side run in a second thread. Usage: sync_disconnect PORT MODE
 *   silent:  the active id's rdma_disconnect, while the passive side's program never answers
 *            the DREQ (its id left connected, as a leaked id): librdmacm's ucma_complete waits
 *            for the kernel's DISCONNECTED, which comes after the DREQ's tries with status
 *            -ETIMEDOUT (IB_CM_DREQ_ERROR), so the call returns -1 ETIMEDOUT then. Printed: the
 *            result, the event it left, and whether it came after 16 tries of
 *            SOFTVERBS_CM_TRY_MS (given in argv[3]) and within 2 s more.
 *   passive / active: that id is migrated to a new event channel after it connected
 *            (rdma_migrate_id, its private channel destroyed), the other side disconnects (in
 *            the second thread, blocking until the DREP), and the migrated id's DISCONNECTED
 *            must arrive on the new channel within 5 s; its rdma_disconnect sends the DREP. */
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include "cm_common.h"

static struct rdma_cm_id *cli;
static int thread_ret, thread_errno;

static void *connect_cli(void *arg)
{
	(void)arg;
	thread_ret = rdma_connect(cli, NULL);
	thread_errno = errno;
	return NULL;
}

static void *disconnect_id(void *arg)
{
	thread_ret = rdma_disconnect(arg);
	thread_errno = errno;
	return NULL;
}

static long ms_since(struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The next event on `c` within 5 s (the program fails without one), printed and acked. */
static void next(struct rdma_event_channel *c, const char *who)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	if (poll(&p, 1, 5000) != 1) {
		printf("%s: no event on the new channel within 5 s\n", who);
		exit(1);
	}
	CHECK(rdma_get_cm_event(c, &e) == 0);
	printf("%s event on the new channel: %s status %d\n", who, rdma_event_str(e->event),
	       e->status);
	CHECK(rdma_ack_cm_event(e) == 0);
}

int main(int argc, char **argv)
{
	struct sockaddr_in any = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_cm_id *listen, *srv, *moved, *other;
	struct rdma_event_channel *nc;
	struct timespec t0;
	pthread_t t;
	long ms, try_ms;
	int n, err;

	if (argc < 3)
		return 2;
	any.sin_port = dst.sin_port = htons(atoi(argv[1]));
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	CHECK(rdma_create_id(NULL, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listen, 1) == 0);
	CHECK(rdma_create_id(NULL, &cli, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(cli, NULL, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(rdma_resolve_route(cli, 2000) == 0);
	CHECK(rdma_create_qp(cli, NULL, &ia) == 0);
	CHECK(pthread_create(&t, NULL, connect_cli, NULL) == 0);
	CHECK(rdma_get_request(listen, &srv) == 0);
	CHECK(rdma_create_qp(srv, NULL, &ia) == 0);
	CHECK(rdma_accept(srv, NULL) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(thread_ret == 0);
	printf("connected: %s and %s\n", rdma_event_str(cli->event->event),
	       rdma_event_str(srv->event->event));

	if (!strcmp(argv[2], "silent")) {
		try_ms = argc > 3 ? atol(argv[3]) : 0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		n = rdma_disconnect(cli);
		err = errno;
		ms = ms_since(&t0);
		printf("rdma_disconnect: %d %s\n", n, n == 0 ? "" : err == ETIMEDOUT ? "ETIMEDOUT" : "?");
		printf("its event: %s status %d\n", cli->event ? rdma_event_str(cli->event->event) :
		       "none", cli->event ? cli->event->status : 0);
		printf("after the DREQ's 16 tries: %s, within 2 s more: %s\n",
		       ms >= 16 * try_ms ? "yes" : "no", ms < 16 * try_ms + 2000 ? "yes" : "no");
		if (ms < 16 * try_ms || ms >= 16 * try_ms + 2000)
			fprintf(stderr, "took %ld ms\n", ms);
		/* The passive side's program answers at last. */
		printf("the passive side's rdma_disconnect: %d\n", rdma_disconnect(srv));
		moved = NULL;
	} else {
		moved = strcmp(argv[2], "passive") ? cli : srv;
		other = moved == cli ? srv : cli;
		CHECK(nc = rdma_create_event_channel());
		CHECK(rdma_migrate_id(moved, nc) == 0);
		printf("migrated: on the new channel %s, event %s\n",
		       moved->channel == nc ? "yes" : "no", moved->event ? "kept" : "acked");
		CHECK(pthread_create(&t, NULL, disconnect_id, other) == 0);
		next(nc, argv[2]);
		CHECK(rdma_disconnect(moved) == 0);
		CHECK(pthread_join(t, NULL) == 0);
		printf("the other side's rdma_disconnect: %d, its event %s status %d\n", thread_ret,
		       rdma_event_str(other->event->event), other->event->status);
		next(nc, argv[2]);
		rdma_destroy_qp(moved);
		CHECK(rdma_destroy_id(moved) == 0);
		rdma_destroy_event_channel(nc);
	}
	(void)thread_errno;
	if (moved != cli) {
		rdma_destroy_qp(cli);
		CHECK(rdma_destroy_id(cli) == 0);
	}
	if (moved != srv) {
		rdma_destroy_qp(srv);
		CHECK(rdma_destroy_id(srv) == 0);
	}
	CHECK(rdma_destroy_id(listen) == 0);
	printf("done\n");
	return 0;
}
