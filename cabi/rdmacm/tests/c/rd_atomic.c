/* rd_atomic.c: the connection parameters' RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH (255), which
 * libfabric's verbs provider passes to rdma_connect and rdma_accept, mean "as many as the
 * device allows", as in librdmacm: both QPs end with the device's max_qp_rd_atom and
 * max_qp_init_rd_atom, not a refused move to RTR. A value over the device's maximum that is
 * not 255 is EINVAL (librdmacm's ucma_valid_param). NULL parameters to rdma_connect and
 * rdma_accept mean the same (librdmacm takes the device's maxima, and the REQ's at most for an
 * accept): a second connection checks that. One process, every wait bounded (cm_common.h's
 * channel, poll 5 s). Usage: rd_atomic PORT */
#include <poll.h>
#include "cm_common.h"

static struct rdma_cm_id *wait_for(enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	if (poll(&p, 1, 5000) != 1) {
		fprintf(stderr, "no event within 5 s (wanted %s)\n", rdma_event_str(want));
		exit(1);
	}
	return expect_status(want, 0, "");
}

static void show(const char *who, struct rdma_cm_id *id, struct ibv_device_attr *dev)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(ibv_query_qp(id->qp, &a, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC,
			   &ia) == 0);
	printf("%s: max_rd_atomic %s, max_dest_rd_atomic %s\n", who,
	       a.max_rd_atomic == dev->max_qp_init_rd_atom ? "the device's" : "other",
	       a.max_dest_rd_atomic == dev->max_qp_rd_atom ? "the device's" : "other");
}

/* The active side disconnects; the passive side answers its DISCONNECTED with rdma_disconnect
 * (its DREP, as with the kernel's CM), and the active side's DISCONNECTED follows; both ids go
 * with their QPs. */
static void disconnect(struct rdma_cm_id *act, struct rdma_cm_id *child)
{
	CHECK(rdma_disconnect(act) == 0);
	CHECK(wait_for(RDMA_CM_EVENT_DISCONNECTED) == child);
	CHECK(rdma_disconnect(child) == 0);
	CHECK(wait_for(RDMA_CM_EVENT_DISCONNECTED) == act);
	rdma_destroy_qp(act);
	rdma_destroy_qp(child);
	CHECK(rdma_destroy_id(act) == 0);
	CHECK(rdma_destroy_id(child) == 0);
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen, *act, *child;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param most = { .responder_resources = RDMA_MAX_RESP_RES,
		.initiator_depth = RDMA_MAX_INIT_DEPTH, .rnr_retry_count = 7, .retry_count = 7 };
	struct rdma_conn_param over = most;
	struct ibv_device_attr dev;
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int n;

	if (argc != 2)
		return 2;
	loopback_pair(atoi(argv[1]), &listen, &act);
	dst.sin_port = htons(atoi(argv[1]));
	CHECK(ibv_query_device(act->verbs, &dev) == 0);
	CHECK(rdma_create_qp(act, NULL, &ia) == 0);
	over.initiator_depth = dev.max_qp_init_rd_atom + 1;
	n = rdma_connect(act, &over);
	printf("initiator depth over the device's: %d %s\n", n, errno == EINVAL ? "EINVAL" : "?");
	CHECK(rdma_connect(act, &most) == 0);
	child = wait_for(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_create_qp(child, NULL, &ia) == 0);
	CHECK(rdma_accept(child, &most) == 0);
	wait_for(RDMA_CM_EVENT_ESTABLISHED);
	wait_for(RDMA_CM_EVENT_ESTABLISHED);
	show("active", act, &dev);
	show("passive", child, &dev);
	disconnect(act, child);

	/* Again, with NULL parameters on both sides. */
	CHECK(rdma_create_id(ch, &act, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(act, NULL, (struct sockaddr *)&dst, 2000) == 0);
	wait_for(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(act, 2000) == 0);
	wait_for(RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(rdma_create_qp(act, NULL, &ia) == 0);
	CHECK(rdma_connect(act, NULL) == 0);
	child = wait_for(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_create_qp(child, NULL, &ia) == 0);
	CHECK(rdma_accept(child, NULL) == 0);
	wait_for(RDMA_CM_EVENT_ESTABLISHED);
	wait_for(RDMA_CM_EVENT_ESTABLISHED);
	show("active, NULL parameters", act, &dev);
	show("passive, NULL parameters", child, &dev);
	disconnect(act, child);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}
