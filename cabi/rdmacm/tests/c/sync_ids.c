/* Synchronous ids (a NULL event channel) on softverbs' librdmacm, in one process
 * (tests/ep.rs runs it): each call returns with its event in id->event; rdma_get_request
 * wants a synchronous listener; and a blocking rdma_connect to a listener that never answers
 * gives up after its bound with ETIMEDOUT. Usage: sync_ids PORT */
#include <time.h>
#include "cm_common.h"

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen, *id, *got;
	struct sockaddr_in any = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct timespec t0, t1;
	int n;

	if (argc != 2)
		return 2;
	any.sin_port = dst.sin_port = htons(atoi(argv[1]));
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	/* A listener on an event channel nobody reads: it never answers. */
	CHECK(ch = rdma_create_event_channel());
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listen, 1) == 0);
	n = rdma_get_request(listen, &got);
	printf("rdma_get_request on a listener with a channel: %d %s\n", n,
	       errno == EINVAL ? "EINVAL" : "?");

	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	printf("synchronous id: channel of its own %s\n", id->channel && id->channel != ch ?
	       "yes" : "no");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	printf("rdma_resolve_addr returned with %s\n", rdma_event_str(id->event->event));
	CHECK(rdma_resolve_route(id, 2000) == 0);
	printf("rdma_resolve_route returned with %s\n", rdma_event_str(id->event->event));
	CHECK(rdma_create_qp(id, NULL, &ia) == 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	n = rdma_connect(id, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("rdma_connect: %d %s after about %ld s\n", n, errno == ETIMEDOUT ? "ETIMEDOUT" : "?",
	       (long)(t1.tv_sec - t0.tv_sec + (t1.tv_nsec >= t0.tv_nsec ? 0 : -1)));
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}
