/* sync_migrate_hosts.c: a synchronous id migrated after it connected, across hosts (netns_cm.rs
 * runs it: the server on one host, the client on the other, the CM between them as MADs).
 *   server ADDR PORT: a synchronous listener; the connected id is migrated to a new event
 *     channel (rdma_migrate_id: its private channel destroyed, as librdmacm's), and the
 *     client's DREQ must give DISCONNECTED there within 10 s; its rdma_disconnect answers
 *     (the DREP) and TIMEWAIT_EXIT follows on the new channel.
 *   client ADDR PORT: a synchronous id connects, waits 1 s (the server migrates meanwhile),
 *     and its blocking rdma_disconnect returns with the server's DREP. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "line %d: %s failed (errno %d)\n", \
	__LINE__, #x, errno); exit(1); } } while (0)

static void next(struct rdma_event_channel *c, enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	if (poll(&p, 1, 10000) != 1) {
		printf("no %s on the new channel within 10 s\n", rdma_event_str(want));
		exit(1);
	}
	CHECK(rdma_get_cm_event(c, &e) == 0);
	printf("event on the new channel: %s status %d\n", rdma_event_str(e->event), e->status);
	CHECK(rdma_ack_cm_event(e) == 0);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_cm_id *id, *srv;
	struct rdma_event_channel *nc;
	int n;

	if (argc != 4)
		return 2;
	a.sin_port = htons(atoi(argv[3]));
	CHECK(inet_pton(AF_INET, argv[2], &a.sin_addr) == 1);
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	if (!strcmp(argv[1], "server")) {
		CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0);
		CHECK(rdma_listen(id, 1) == 0);
		CHECK(rdma_get_request(id, &srv) == 0);
		CHECK(rdma_create_qp(srv, NULL, &ia) == 0);
		CHECK(rdma_accept(srv, NULL) == 0);
		printf("accepted: %s\n", rdma_event_str(srv->event->event));
		CHECK(nc = rdma_create_event_channel());
		CHECK(rdma_migrate_id(srv, nc) == 0);
		printf("migrated: on the new channel %s\n", srv->channel == nc ? "yes" : "no");
		fflush(stdout);
		next(nc, RDMA_CM_EVENT_DISCONNECTED);
		CHECK(rdma_disconnect(srv) == 0);
		next(nc, RDMA_CM_EVENT_TIMEWAIT_EXIT);
		rdma_destroy_qp(srv);
		CHECK(rdma_destroy_id(srv) == 0);
		rdma_destroy_event_channel(nc);
	} else {
		CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0);
		CHECK(rdma_resolve_route(id, 2000) == 0);
		CHECK(rdma_create_qp(id, NULL, &ia) == 0);
		CHECK(rdma_connect(id, NULL) == 0);
		printf("connected: %s\n", rdma_event_str(id->event->event));
		sleep(1);
		n = rdma_disconnect(id);
		printf("rdma_disconnect: %d, its event %s status %d\n", n,
		       id->event ? rdma_event_str(id->event->event) : "none",
		       id->event ? id->event->status : 0);
		rdma_destroy_qp(id);
	}
	CHECK(rdma_destroy_id(id) == 0);
	printf("done\n");
	return 0;
}
