/* migrate.c: rdma_migrate_id of a synchronous id (made with a NULL channel) onto an event
 * channel, as libfabric's verbs provider does with every msg endpoint and passive endpoint:
 * rdma_create_id(NULL) and a blocking rdma_resolve_addr (or rdma_bind_addr), then
 * rdma_migrate_id to its event queue's channel (made non-blocking and polled), then
 * rdma_listen, or rdma_resolve_route whose ROUTE_RESOLVED it reads there before rdma_connect.
 * After the migration the id is asynchronous, as librdmacm's: the event the last blocking call
 * left is acknowledged (id->event NULL), the next calls return at once and their events are
 * read on the new channel; a listener bound before the migration gets its REQs there. Then an
 * asynchronous id migrated to NULL becomes synchronous, and a synchronous id migrated to NULL
 * is EINVAL. Every wait is bounded (poll, 5 s). Usage: migrate PORT */
#include <fcntl.h>
#include <poll.h>
#include "cm_common.h"

/* The next event on `c` within 5 s (the program fails without one); printed, checked, acked. */
static struct rdma_cm_id *next(struct rdma_event_channel *c, enum rdma_cm_event_type want,
			       const char *who)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	if (poll(&p, 1, 5000) != 1) {
		fprintf(stderr, "%s: no event within 5 s (wanted %s)\n", who, rdma_event_str(want));
		exit(1);
	}
	CHECK(rdma_get_cm_event(c, &e) == 0);
	printf("%s event %s status %d\n", who, rdma_event_str(e->event), e->status);
	if (e->event != want || e->status != 0)
		exit(1);
	id = e->id;
	CHECK(rdma_ack_cm_event(e) == 0);
	return id;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *srv, *cli;
	struct rdma_cm_id *listen, *id, *child, *back;
	struct rdma_cm_event *e;
	struct sockaddr_in any = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
		.rnr_retry_count = 7, .retry_count = 7 };
	int n;

	if (argc != 2)
		return 2;
	any.sin_port = dst.sin_port = htons(atoi(argv[1]));
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(srv = rdma_create_event_channel());
	CHECK(cli = rdma_create_event_channel());
	CHECK(fcntl(srv->fd, F_SETFL, fcntl(srv->fd, F_GETFL) | O_NONBLOCK) == 0);
	CHECK(fcntl(cli->fd, F_SETFL, fcntl(cli->fd, F_GETFL) | O_NONBLOCK) == 0);

	/* The passive side: bound while synchronous, migrated, then listening. */
	CHECK(rdma_create_id(NULL, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_migrate_id(listen, srv) == 0);
	printf("listener on the new channel: %s\n", listen->channel == srv ? "yes" : "no");
	CHECK(rdma_listen(listen, 8) == 0);

	/* The active side: resolved while synchronous, then migrated (to its own channel first:
	 * nothing changes). */
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	printf("blocking resolve left %s\n", id->event ? rdma_event_str(id->event->event) : "none");
	CHECK(rdma_migrate_id(id, id->channel) == 0);
	CHECK(rdma_migrate_id(id, cli) == 0);
	printf("after the migration: event %s, channel %s\n", id->event ? "left" : "none",
	       id->channel == cli ? "the new one" : "another");
	n = rdma_get_cm_event(cli, &e);
	printf("nothing waits on the new channel: %s\n", n == -1 && errno == EAGAIN ? "EAGAIN" : "?");
	CHECK(rdma_resolve_route(id, 2000) == 0);
	printf("rdma_resolve_route returned with event %s\n", id->event ? "left" : "none");
	CHECK(next(cli, RDMA_CM_EVENT_ROUTE_RESOLVED, "client") == id);
	CHECK(rdma_create_qp(id, NULL, &ia) == 0);
	CHECK(rdma_connect(id, &param) == 0);
	child = next(srv, RDMA_CM_EVENT_CONNECT_REQUEST, "server");
	printf("request's id on the listener's channel: %s\n", child->channel == srv ? "yes" : "no");
	CHECK(rdma_create_qp(child, NULL, &ia) == 0);
	CHECK(rdma_accept(child, &param) == 0);
	CHECK(next(cli, RDMA_CM_EVENT_ESTABLISHED, "client") == id);
	CHECK(next(srv, RDMA_CM_EVENT_ESTABLISHED, "server") == child);
	CHECK(rdma_disconnect(id) == 0);
	/* The server answers its DISCONNECTED with rdma_disconnect: the DREP, as with the
	 * kernel's CM, which sends it then (not when the DREQ comes); the client's follows. */
	CHECK(next(srv, RDMA_CM_EVENT_DISCONNECTED, "server") == child);
	CHECK(rdma_disconnect(child) == 0);
	CHECK(next(cli, RDMA_CM_EVENT_DISCONNECTED, "client") == id);
	rdma_destroy_qp(id);
	rdma_destroy_qp(child);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(child) == 0);
	CHECK(rdma_destroy_id(listen) == 0);

	/* Back to synchronous: an id on a channel migrated to NULL waits in its calls again. */
	CHECK(rdma_create_id(cli, &back, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_migrate_id(back, NULL) == 0);
	printf("migrated to NULL: channel of its own %s\n",
	       back->channel && back->channel != cli && back->channel != srv ? "yes" : "no");
	CHECK(rdma_resolve_addr(back, NULL, (struct sockaddr *)&dst, 2000) == 0);
	printf("blocking resolve left %s\n",
	       back->event ? rdma_event_str(back->event->event) : "none");
	n = rdma_migrate_id(back, NULL);
	printf("a synchronous id migrated to NULL: %d %s\n", n, errno == EINVAL ? "EINVAL" : "?");
	CHECK(rdma_destroy_id(back) == 0);
	rdma_destroy_event_channel(cli);
	rdma_destroy_event_channel(srv);
	return 0;
}
