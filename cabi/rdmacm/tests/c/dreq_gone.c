/*
 * dreq_gone.c PORT: the active side's rdma_disconnect when the passive program has gone
 * quiet in perftest -R's ways, in one process with two RC ids on 127.0.0.1:PORT, the passive
 * one on a channel of its own that is read only for its CONNECT_REQUEST (perftest's server
 * reads its data channel until it accepts, never after). Each order ends with the active
 * side's DISCONNECTED, status 0, well within the DREQ's life (74 s: every wait here is 10 s),
 * as under the kernel's CM, where a DREQ for an id that no longer exists is answered with a
 * DREP (ib_cm's cm_dreq_handler: cm_issue_drep) and a destroyed connected id sends its DREQ
 * (cm_destroy_id):
 *   destroyed:  the passive QP and id are destroyed (no rdma_disconnect), then the active
 *               side disconnects;
 *   channel:    the same, and the passive channel destroyed too;
 *   unread:     the active side disconnects first; the passive program, without reading its
 *               channel, destroys its QP, calls rdma_disconnect (perftest's trailing
 *               rdma_disconnect(ctx->cm_id)) and destroys its id.
 * Prints "<order>: active event <name>, status <n>" for each event of the active side up to
 * TIMEWAIT_EXIT, then "done".
 */
#include <poll.h>
#include <infiniband/verbs.h>
#include "cm_common.h"

static struct rdma_event_channel *pch;

static void make_qp(struct rdma_cm_id *id, struct ibv_pd **pd, struct ibv_cq **cq)
{
	struct ibv_qp_init_attr qa = { 0 };

	CHECK(*pd = ibv_alloc_pd(id->verbs));
	CHECK(*cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0));
	qa.send_cq = qa.recv_cq = *cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, *pd, &qa) == 0);
}

/* The next event on `c` within 10 s, acked; its type and status. */
static enum rdma_cm_event_type next(struct rdma_event_channel *c, int *status)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct rdma_cm_event *e;
	enum rdma_cm_event_type t;

	if (poll(&p, 1, 10000) != 1) {
		fprintf(stderr, "no event within 10 s\n");
		exit(1);
	}
	CHECK(rdma_get_cm_event(c, &e) == 0);
	t = e->event;
	*status = e->status;
	CHECK(rdma_ack_cm_event(e) == 0);
	return t;
}

static void run(int port, const char *order)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *listen, *act, *pas;
	struct rdma_cm_event *e;
	struct ibv_pd *apd, *ppd;
	struct ibv_cq *acq, *pcq;
	int status;
	enum rdma_cm_event_type t;

	CHECK(pch = rdma_create_event_channel());
	CHECK(rdma_create_id(pch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listen, 1) == 0);
	CHECK(ch = rdma_create_event_channel());
	CHECK(rdma_create_id(ch, &act, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(act, NULL, (struct sockaddr *)&dst, 2000) == 0);
	expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(act, 2000) == 0);
	expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
	make_qp(act, &apd, &acq);
	CHECK(rdma_connect(act, &cp) == 0);
	CHECK(rdma_get_cm_event(pch, &e) == 0);
	CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	pas = e->id;
	CHECK(rdma_ack_cm_event(e) == 0);
	make_qp(pas, &ppd, &pcq);
	CHECK(rdma_accept(pas, NULL) == 0);
	CHECK(next(ch, &status) == RDMA_CM_EVENT_ESTABLISHED && status == 0);
	CHECK(rdma_destroy_id(listen) == 0);

	if (!strcmp(order, "unread")) {
		CHECK(rdma_disconnect(act) == 0);
		rdma_destroy_qp(pas);
		CHECK(rdma_disconnect(pas) == 0);
		CHECK(rdma_destroy_id(pas) == 0);
	} else {
		rdma_destroy_qp(pas);
		CHECK(rdma_destroy_id(pas) == 0);
		if (!strcmp(order, "channel"))
			rdma_destroy_event_channel(pch);
		CHECK(rdma_disconnect(act) == 0);
	}
	do {
		t = next(ch, &status);
		printf("%s: active event %s, status %d\n", order, rdma_event_str(t), status);
	} while (t != RDMA_CM_EVENT_TIMEWAIT_EXIT);
	rdma_destroy_qp(act);
	CHECK(rdma_destroy_id(act) == 0);
	if (strcmp(order, "channel"))
		rdma_destroy_event_channel(pch);
	rdma_destroy_event_channel(ch);
	CHECK(ibv_destroy_cq(acq) == 0 && ibv_destroy_cq(pcq) == 0);
	CHECK(ibv_dealloc_pd(apd) == 0 && ibv_dealloc_pd(ppd) == 0);
}

int main(int argc, char **argv)
{
	const char *orders[] = { "destroyed", "channel", "unread" };

	if (argc != 2) {
		fprintf(stderr, "usage: dreq_gone PORT\n");
		return 2;
	}
	for (unsigned i = 0; i < sizeof orders / sizeof *orders; i++)
		run(atoi(argv[1]), orders[i]);
	printf("done\n");
	return 0;
}
