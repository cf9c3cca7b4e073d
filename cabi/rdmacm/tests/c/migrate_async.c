/* migrate_async.c: asynchronous ids moved to another event channel after they connected
 * (rdma_migrate_id), as librpma does on both sides: the server accepts an id its listener's
 * channel gave and moves it to a channel of its own, then waits there for ESTABLISHED while
 * nobody reads the listener's channel; the client moves its connected id too. With the
 * kernel's CM (RDMA_USER_CM_CMD_MIGRATE_ID) the id's pending and later events are on the new
 * channel at once, whatever happens to the old one. One process, both sides on loopback.
 * Usage: migrate_async PORT WHEN OLD
 *   WHEN  pending: the client reads its ESTABLISHED (so its RTU is sent) before the server
 *         migrates: the RTU waits on the listener's channel and must move with the id;
 *         later: the server migrates right after rdma_accept, the RTU comes after.
 *   OLD   keep: the old channels stay, unread; destroy: the listener and its channel, and the
 *         client's old channel, are destroyed right after the migration.
 * Then the client disconnects: the server's DISCONNECTED, its rdma_disconnect (the DREP), the
 * client's DISCONNECTED and both TIMEWAIT_EXITs, each on the new channel within 5 s. */
#include <poll.h>
#include "cm_common.h"

/* The next event on `c` within 5 s: printed as "<who>: <event> status <status>" and acked;
 * the program fails without one. Its id. */
static struct rdma_cm_id *next(struct rdma_event_channel *c, const char *who)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	if (poll(&p, 1, 5000) != 1) {
		printf("%s: no event within 5 s\n", who);
		exit(1);
	}
	CHECK(rdma_get_cm_event(c, &e) == 0);
	printf("%s: %s status %d\n", who, rdma_event_str(e->event), e->status);
	id = e->id;
	CHECK(rdma_ack_cm_event(e) == 0);
	return id;
}

int main(int argc, char **argv)
{
	struct sockaddr_in any = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_event_channel *lch, *cch, *sch, *nch;
	struct rdma_cm_id *listen, *cli, *srv;
	int pending, destroy;

	if (argc < 4)
		return 2;
	any.sin_port = dst.sin_port = htons(atoi(argv[1]));
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	pending = strcmp(argv[2], "pending") == 0;
	destroy = strcmp(argv[3], "destroy") == 0;

	CHECK(lch = rdma_create_event_channel());
	CHECK(cch = rdma_create_event_channel());
	CHECK(sch = rdma_create_event_channel());
	CHECK(nch = rdma_create_event_channel());
	CHECK(rdma_create_id(lch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listen, 4) == 0);
	CHECK(rdma_create_id(cch, &cli, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(cli, NULL, (struct sockaddr *)&dst, 2000) == 0);
	next(cch, "client");
	CHECK(rdma_resolve_route(cli, 2000) == 0);
	next(cch, "client");
	CHECK(rdma_create_qp(cli, NULL, &ia) == 0);
	CHECK(rdma_connect(cli, NULL) == 0);
	srv = next(lch, "listener");
	CHECK(rdma_create_qp(srv, NULL, &ia) == 0);
	CHECK(rdma_accept(srv, NULL) == 0);
	if (pending)
		next(cch, "client");
	/* The server's id moves to its own channel; the listener's is never read again. */
	CHECK(rdma_migrate_id(srv, sch) == 0);
	if (!pending)
		next(cch, "client");
	/* The client's connected id moves too. */
	CHECK(rdma_migrate_id(cli, nch) == 0);
	if (destroy) {
		CHECK(rdma_destroy_id(listen) == 0);
		rdma_destroy_event_channel(lch);
		rdma_destroy_event_channel(cch);
		printf("old channels destroyed\n");
	}
	next(sch, "server");
	CHECK(rdma_disconnect(cli) == 0);
	next(sch, "server");
	CHECK(rdma_disconnect(srv) == 0);
	next(nch, "client");
	next(nch, "client");
	next(sch, "server");
	rdma_destroy_qp(srv);
	rdma_destroy_qp(cli);
	CHECK(rdma_destroy_id(srv) == 0);
	CHECK(rdma_destroy_id(cli) == 0);
	if (!destroy) {
		CHECK(rdma_destroy_id(listen) == 0);
		rdma_destroy_event_channel(lch);
		rdma_destroy_event_channel(cch);
	}
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(nch);
	printf("done\n");
	return 0;
}
